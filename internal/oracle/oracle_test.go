package oracle

import (
	"math/rand/v2"
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
)

// A hand-built DAG: n0 fails, n1 succeeds; n2 = all_of(n0, n1) is skipped,
// n3 = any_of(n0, n1) runs, n4 = quorum 2 of (n1, n3) runs and fails,
// n5 = all_of(n2) is skipped in turn.
func TestExpected(t *testing.T) {
	t.Parallel()
	d := &DAG{
		Preds: [][]int{nil, nil, {0, 1}, {0, 1}, {1, 3}, {2}},
		Policies: []ffdtype.Policy{{}, {}, {Kind: ffdtype.AllOf}, {Kind: ffdtype.AnyOf},
			{Kind: ffdtype.Quorum, K: 2}, {Kind: ffdtype.AllOf}},
		Succeeds: []bool{false, true, true, true, false, true},
	}
	want := []ffdtype.State{ffdtype.StateFailed, ffdtype.StateCompleted, ffdtype.StateSkipped,
		ffdtype.StateCompleted, ffdtype.StateFailed, ffdtype.StateSkipped}
	got := d.Expected()
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("n%d: %s, want %s", i, got[i], want[i])
		}
	}
	if !d.Deterministic() {
		t.Error("a let_run DAG reported as order-dependent")
	}
}

// Random DAGs are acyclic (edges go to higher indexes), have no duplicate
// edges, and carry policies their evaluation accepts.
func TestRandomIsWellFormed(t *testing.T) {
	t.Parallel()
	for seed := range uint64(50) {
		d := Random(rand.New(rand.NewPCG(seed, 7)), 60, seed%2 == 0)
		for i, preds := range d.Preds {
			seen := map[int]bool{}
			for _, p := range preds {
				if p >= i || seen[p] {
					t.Fatalf("seed %d: n%d has upstream n%d (upstreams %v)", seed, i, p, preds)
				}
				seen[p] = true
			}
			pol := d.Policies[i]
			if len(preds) == 0 {
				if pol != (ffdtype.Policy{}) {
					t.Fatalf("seed %d: root n%d has policy %v", seed, i, pol)
				}
				continue
			}
			if pol.Kind == ffdtype.Quorum && (pol.K < 1 || pol.K > len(preds)) {
				t.Fatalf("seed %d: n%d quorum %d of %d", seed, i, pol.K, len(preds))
			}
			if seed%2 == 1 && pol.OnSatisfied == ffdtype.CancelRemaining {
				t.Fatalf("seed %d: cancel_remaining drawn without being asked for", seed)
			}
		}
	}
}
