package flows

import (
	"fmt"
	"strconv"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// NormalizePolicy fills the default kind (all_of) and OnSatisfied
// (let_run) and validates.
func NormalizePolicy(p *ffdtype.Policy) error {
	switch p.Kind {
	case "":
		p.Kind = ffdtype.AllOf
	case ffdtype.AllOf, ffdtype.AnyOf, ffdtype.Quorum:
	default:
		return fault.Invalid(ffdtype.KindInvalidValue, "policy", string(p.Kind), "want all_of, any_of or quorum")
	}
	if p.Kind == ffdtype.Quorum {
		if p.K < 1 {
			return fault.Invalid(ffdtype.KindOutOfRange, "k", strconv.Itoa(p.K), "quorum needs k ≥ 1")
		}
	} else if p.K != 0 {
		return fault.Invalid(ffdtype.KindInvalidValue, "k", strconv.Itoa(p.K), fmt.Sprintf("k applies to quorum only, not %s", p.Kind))
	}
	switch {
	case p.Kind == ffdtype.AllOf && p.OnSatisfied != "":
		return fault.Invalid(ffdtype.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "all_of has no on_satisfied: nothing remains once all succeeded")
	case p.Kind == ffdtype.AllOf:
	case p.OnSatisfied == "":
		p.OnSatisfied = ffdtype.LetRun
	case p.OnSatisfied != ffdtype.CancelRemaining && p.OnSatisfied != ffdtype.LetRun:
		return fault.Invalid(ffdtype.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "want cancel_remaining or let_run")
	}
	return nil
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
func Evaluate(p ffdtype.Policy, c ffdtype.Counts) ffdtype.Decision {
	if c.Total <= 0 {
		return ffdtype.DecisionPending
	}
	resolvedBad := c.Fail + c.Skip
	switch p.Kind {
	case ffdtype.AnyOf:
		if c.Success >= 1 {
			return ffdtype.DecisionSatisfied
		}
		if resolvedBad >= c.Total {
			return ffdtype.DecisionImpossible
		}
	case ffdtype.Quorum:
		if c.Success >= p.K {
			return ffdtype.DecisionSatisfied
		}
		if c.Total-resolvedBad < p.K {
			return ffdtype.DecisionImpossible
		}
	default: // all_of
		if c.Success >= c.Total {
			return ffdtype.DecisionSatisfied
		}
		if resolvedBad > 0 {
			return ffdtype.DecisionImpossible
		}
	}
	return ffdtype.DecisionPending
}
