package flows

import (
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	allOf, anyOf := ffdtype.Policy{Kind: ffdtype.AllOf}, ffdtype.Policy{Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.LetRun}
	q2 := ffdtype.Policy{Kind: ffdtype.Quorum, K: 2, OnSatisfied: ffdtype.LetRun}
	q3 := ffdtype.Policy{Kind: ffdtype.Quorum, K: 3, OnSatisfied: ffdtype.CancelRemaining}
	tests := []struct {
		p    ffdtype.Policy
		c    ffdtype.Counts
		want ffdtype.Decision
	}{
		{allOf, ffdtype.Counts{Total: 0}, ffdtype.DecisionPending},
		{allOf, ffdtype.Counts{Total: 3, Success: 2}, ffdtype.DecisionPending},
		{allOf, ffdtype.Counts{Total: 3, Success: 3}, ffdtype.DecisionSatisfied},
		{allOf, ffdtype.Counts{Total: 3, Success: 2, Fail: 1}, ffdtype.DecisionImpossible},
		{allOf, ffdtype.Counts{Total: 3, Skip: 1}, ffdtype.DecisionImpossible},
		{anyOf, ffdtype.Counts{Total: 3}, ffdtype.DecisionPending},
		{anyOf, ffdtype.Counts{Total: 3, Success: 1}, ffdtype.DecisionSatisfied},
		{anyOf, ffdtype.Counts{Total: 3, Fail: 2}, ffdtype.DecisionPending},
		{anyOf, ffdtype.Counts{Total: 3, Fail: 2, Skip: 1}, ffdtype.DecisionImpossible},
		{anyOf, ffdtype.Counts{Total: 3, Fail: 2, Success: 1}, ffdtype.DecisionSatisfied},
		{q2, ffdtype.Counts{Total: 3, Success: 1}, ffdtype.DecisionPending},
		{q2, ffdtype.Counts{Total: 3, Success: 2}, ffdtype.DecisionSatisfied},
		{q2, ffdtype.Counts{Total: 3, Success: 1, Fail: 1}, ffdtype.DecisionPending},
		{q2, ffdtype.Counts{Total: 3, Fail: 2}, ffdtype.DecisionImpossible},
		{q2, ffdtype.Counts{Total: 3, Success: 1, Fail: 1, Skip: 1}, ffdtype.DecisionImpossible},
		{q3, ffdtype.Counts{Total: 5, Fail: 2}, ffdtype.DecisionPending},
		{q3, ffdtype.Counts{Total: 5, Fail: 3}, ffdtype.DecisionImpossible},
		{q3, ffdtype.Counts{Total: 5, Success: 3, Fail: 2}, ffdtype.DecisionSatisfied},
		{q3, ffdtype.Counts{Total: 2}, ffdtype.DecisionImpossible},
	}
	for _, tt := range tests {
		if got := Evaluate(tt.p, tt.c); got != tt.want {
			t.Errorf("Evaluate(%v, %+v) = %s, want %s", tt.p, tt.c, got, tt.want)
		}
	}
}

// FuzzEvaluate checks the laws of the join policies over arbitrary
// counters: satisfied and impossible are never both true of one state;
// counts never exceed the total; a decision, once reached, is what every
// later resolution would decide too (so deciding once loses nothing); and a
// group whose every edge resolved has decided.
func FuzzEvaluate(f *testing.F) {
	f.Add(uint8(0), uint8(1), uint8(3), uint8(1), uint8(1), uint8(0), uint8(2))
	f.Add(uint8(2), uint8(3), uint8(5), uint8(0), uint8(3), uint8(0), uint8(1))
	f.Add(uint8(1), uint8(0), uint8(4), uint8(0), uint8(2), uint8(2), uint8(0))
	f.Fuzz(func(t *testing.T, kind, k, total, success, fail, skip, more uint8) {
		p := ffdtype.Policy{Kind: []ffdtype.PolicyKind{ffdtype.AllOf, ffdtype.AnyOf, ffdtype.Quorum}[kind%3]}
		if p.Kind == ffdtype.Quorum {
			p.K = int(k%16) + 1
		}
		c := ffdtype.Counts{Total: int(total%32) + 1}
		c.Success = int(success) % (c.Total + 1)
		c.Fail = int(fail) % (c.Total - c.Success + 1)
		c.Skip = int(skip) % (c.Total - c.Success - c.Fail + 1)
		d := Evaluate(p, c)
		// Resolve `more` further edges, one by one, in a pattern from the
		// input; a decided group must stay decided the same way.
		for i := 0; i < int(more%8); i++ {
			left := c.Total - c.Success - c.Fail - c.Skip
			if left == 0 {
				break
			}
			switch (int(more) + i) % 3 {
			case 0:
				c.Success++
			case 1:
				c.Fail++
			default:
				c.Skip++
			}
			next := Evaluate(p, c)
			if d != ffdtype.DecisionPending && next != d {
				t.Fatalf("%v: decided %s, then %s after one more resolution (%+v)", p, d, next, c)
			}
			d = next
		}
		if c.Success+c.Fail+c.Skip > c.Total {
			t.Fatalf("counts exceed total: %+v", c)
		}
		if c.Success+c.Fail+c.Skip == c.Total && Evaluate(p, c) == ffdtype.DecisionPending {
			t.Fatalf("%v: every edge resolved (%+v) but still pending", p, c)
		}
		sat := (p.Kind == ffdtype.AllOf && c.Success == c.Total) || (p.Kind == ffdtype.AnyOf && c.Success >= 1) || (p.Kind == ffdtype.Quorum && c.Success >= p.K)
		imp := (p.Kind == ffdtype.AllOf && c.Fail+c.Skip > 0) || (p.Kind == ffdtype.AnyOf && c.Fail+c.Skip == c.Total) || (p.Kind == ffdtype.Quorum && c.Total-c.Fail-c.Skip < p.K)
		if sat && imp {
			t.Fatalf("%v at %+v: both satisfied and impossible", p, c)
		}
	})
}
