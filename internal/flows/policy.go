package flows

import (
	"fmt"
	"strconv"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// NormalizePolicy fills the default kind (all_of) and OnSatisfied
// (let_run) and validates.
func NormalizePolicy(p *store.Policy) error {
	switch p.Kind {
	case "":
		p.Kind = store.AllOf
	case store.AllOf, store.AnyOf, store.Quorum:
	default:
		return fault.Invalid(fault.KindInvalidValue, "policy", string(p.Kind), "want all_of, any_of or quorum")
	}
	if p.Kind == store.Quorum {
		if p.K < 1 {
			return fault.Invalid(fault.KindOutOfRange, "k", strconv.Itoa(p.K), "quorum needs k ≥ 1")
		}
	} else if p.K != 0 {
		return fault.Invalid(fault.KindInvalidValue, "k", strconv.Itoa(p.K), fmt.Sprintf("k applies to quorum only, not %s", p.Kind))
	}
	switch {
	case p.Kind == store.AllOf && p.OnSatisfied != "":
		return fault.Invalid(fault.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "all_of has no on_satisfied: nothing remains once all succeeded")
	case p.Kind == store.AllOf:
	case p.OnSatisfied == "":
		p.OnSatisfied = store.LetRun
	case p.OnSatisfied != store.CancelRemaining && p.OnSatisfied != store.LetRun:
		return fault.Invalid(fault.KindInvalidValue, "on_satisfied", string(p.OnSatisfied), "want cancel_remaining or let_run")
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
func Evaluate(p store.Policy, c store.Counts) store.Decision {
	if c.Total <= 0 {
		return store.Pending
	}
	resolvedBad := c.Fail + c.Skip
	switch p.Kind {
	case store.AnyOf:
		if c.Success >= 1 {
			return store.Satisfied
		}
		if resolvedBad >= c.Total {
			return store.Impossible
		}
	case store.Quorum:
		if c.Success >= p.K {
			return store.Satisfied
		}
		if c.Total-resolvedBad < p.K {
			return store.Impossible
		}
	default: // all_of
		if c.Success >= c.Total {
			return store.Satisfied
		}
		if resolvedBad > 0 {
			return store.Impossible
		}
	}
	return store.Pending
}
