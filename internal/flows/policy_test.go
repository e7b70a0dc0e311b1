package flows

import (
	"testing"

	"github.com/flowfabric/ffd/internal/store"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	allOf, anyOf := store.Policy{Kind: store.AllOf}, store.Policy{Kind: store.AnyOf, OnSatisfied: store.LetRun}
	q2 := store.Policy{Kind: store.Quorum, K: 2, OnSatisfied: store.LetRun}
	q3 := store.Policy{Kind: store.Quorum, K: 3, OnSatisfied: store.CancelRemaining}
	tests := []struct {
		p    store.Policy
		c    store.Counts
		want store.Decision
	}{
		{allOf, store.Counts{Total: 0}, store.Pending},
		{allOf, store.Counts{Total: 3, Success: 2}, store.Pending},
		{allOf, store.Counts{Total: 3, Success: 3}, store.Satisfied},
		{allOf, store.Counts{Total: 3, Success: 2, Fail: 1}, store.Impossible},
		{allOf, store.Counts{Total: 3, Skip: 1}, store.Impossible},
		{anyOf, store.Counts{Total: 3}, store.Pending},
		{anyOf, store.Counts{Total: 3, Success: 1}, store.Satisfied},
		{anyOf, store.Counts{Total: 3, Fail: 2}, store.Pending},
		{anyOf, store.Counts{Total: 3, Fail: 2, Skip: 1}, store.Impossible},
		{anyOf, store.Counts{Total: 3, Fail: 2, Success: 1}, store.Satisfied},
		{q2, store.Counts{Total: 3, Success: 1}, store.Pending},
		{q2, store.Counts{Total: 3, Success: 2}, store.Satisfied},
		{q2, store.Counts{Total: 3, Success: 1, Fail: 1}, store.Pending},
		{q2, store.Counts{Total: 3, Fail: 2}, store.Impossible},
		{q2, store.Counts{Total: 3, Success: 1, Fail: 1, Skip: 1}, store.Impossible},
		{q3, store.Counts{Total: 5, Fail: 2}, store.Pending},
		{q3, store.Counts{Total: 5, Fail: 3}, store.Impossible},
		{q3, store.Counts{Total: 5, Success: 3, Fail: 2}, store.Satisfied},
		{q3, store.Counts{Total: 2}, store.Impossible},
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
		p := store.Policy{Kind: []store.PolicyKind{store.AllOf, store.AnyOf, store.Quorum}[kind%3]}
		if p.Kind == store.Quorum {
			p.K = int(k%16) + 1
		}
		c := store.Counts{Total: int(total%32) + 1}
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
			if d != store.Pending && next != d {
				t.Fatalf("%v: decided %s, then %s after one more resolution (%+v)", p, d, next, c)
			}
			d = next
		}
		if c.Success+c.Fail+c.Skip > c.Total {
			t.Fatalf("counts exceed total: %+v", c)
		}
		if c.Success+c.Fail+c.Skip == c.Total && Evaluate(p, c) == store.Pending {
			t.Fatalf("%v: every edge resolved (%+v) but still pending", p, c)
		}
		sat := (p.Kind == store.AllOf && c.Success == c.Total) || (p.Kind == store.AnyOf && c.Success >= 1) || (p.Kind == store.Quorum && c.Success >= p.K)
		imp := (p.Kind == store.AllOf && c.Fail+c.Skip > 0) || (p.Kind == store.AnyOf && c.Fail+c.Skip == c.Total) || (p.Kind == store.Quorum && c.Total-c.Fail-c.Skip < p.K)
		if sat && imp {
			t.Fatalf("%v at %+v: both satisfied and impossible", p, c)
		}
	})
}
