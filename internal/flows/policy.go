package flows

import (
	"fmt"
	"strconv"

	"github.com/flowfabric/ffd/internal/fault"
)

// PolicyKind is a join policy.
type PolicyKind string

// Join policies (docs/design.md section 5).
const (
	AllOf  PolicyKind = "all_of"
	AnyOf  PolicyKind = "any_of"
	Quorum PolicyKind = "quorum"
)

// OnSatisfied says what happens to the other upstreams once a group is
// satisfied.
type OnSatisfied string

// OnSatisfied values.
const (
	CancelRemaining OnSatisfied = "cancel_remaining"
	LetRun          OnSatisfied = "let_run"
)

// Policy is a downstream's join policy.
type Policy struct {
	Kind        PolicyKind
	K           int         // quorum only, ≥ 1
	OnSatisfied OnSatisfied // any_of and quorum; default let_run
}

// Normalize fills the default OnSatisfied and validates.
func (p *Policy) Normalize() error {
	switch p.Kind {
	case "":
		p.Kind = AllOf
	case AllOf, AnyOf, Quorum:
	default:
		return fault.Invalid(fault.KindInvalidValue, "policy", string(p.Kind), "want all_of, any_of or quorum")
	}
	if p.Kind == Quorum {
		if p.K < 1 {
			return fault.Invalid(fault.KindOutOfRange, "k", strconv.Itoa(p.K), "quorum needs k ≥ 1")
		}
	} else if p.K != 0 {
		return fault.Invalid(fault.KindInvalidValue, "k", strconv.Itoa(p.K), fmt.Sprintf("k applies to quorum only, not %s", p.Kind))
	}
	switch {
	case p.Kind == AllOf && p.OnSatisfied != "":
		return fault.Invalid(fault.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "all_of has no on_satisfied: nothing remains once all succeeded")
	case p.Kind == AllOf:
	case p.OnSatisfied == "":
		p.OnSatisfied = LetRun
	case p.OnSatisfied != CancelRemaining && p.OnSatisfied != LetRun:
		return fault.Invalid(fault.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "want cancel_remaining or let_run")
	}
	return nil
}

// Decision is a group's verdict.
type Decision string

// Decisions.
const (
	Pending    Decision = "pending"
	Satisfied  Decision = "satisfied"
	Impossible Decision = "impossible"
)

// Counts are a group's counters: applied edges and resolved ones by
// upstream outcome.
type Counts struct {
	Total, Success, Fail, Skip int
}

// Evaluate decides a group that has not decided yet (docs/design.md section 5):
//
//	all_of:   satisfied when success = total;  impossible when fail + skip > 0
//	any_of:   satisfied when success ≥ 1;      impossible when fail + skip = total
//	quorum k: satisfied when success ≥ k;      impossible when total − fail − skip < k
//
// A group with no applied edge is pending. Satisfaction is tested first, so
// counts that satisfy never also read as impossible. Callers evaluate only
// undecided groups: a decision is final.
func Evaluate(p Policy, c Counts) Decision {
	if c.Total <= 0 {
		return Pending
	}
	resolvedBad := c.Fail + c.Skip
	switch p.Kind {
	case AnyOf:
		if c.Success >= 1 {
			return Satisfied
		}
		if resolvedBad >= c.Total {
			return Impossible
		}
	case Quorum:
		if c.Success >= p.K {
			return Satisfied
		}
		if c.Total-resolvedBad < p.K {
			return Impossible
		}
	default: // all_of
		if c.Success >= c.Total {
			return Satisfied
		}
		if resolvedBad > 0 {
			return Impossible
		}
	}
	return Pending
}
