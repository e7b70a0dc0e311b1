package cascade_test

import (
	"sync"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
)

type recorder struct {
	mu        sync.Mutex
	events    int
	delays    []time.Duration
	outcomes  map[string]int
	decisions map[ffdtype.Decision]int
	siblings  int
}

func (r *recorder) Dispatched(n int, delays []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events += n
	r.delays = append(r.delays, delays...)
}

func (r *recorder) Resolved(by map[string]int, dec map[ffdtype.Decision]int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, v := range by {
		r.outcomes[k] += v
	}
	for k, v := range dec {
		r.decisions[k] += v
	}
}

func (r *recorder) SiblingsCancelled(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.siblings += n
}

// The hooks see every dispatched event with its delay, every resolved edge
// by outcome, every decision and every cancelled sibling.
func TestHooks(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rec := &recorder{outcomes: map[string]int{}, decisions: map[ffdtype.Decision]int{}}
	f.d = cascade.New(f.Pool, rec)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.CancelRemaining}}, "a->d", "b->d", "c->d", "a->e")
	f.claim(g, "b")
	f.run(g, "a", false) // e impossible (skipped); d still open
	f.run(g, "c", true)  // d satisfied; b cancelled
	f.drain()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// a, c, e (skipped), b (cancelled): four events.
	if rec.events != 4 || len(rec.delays) != 4 {
		t.Fatalf("hooks saw %d events, %d delays; want 4 and 4", rec.events, len(rec.delays))
	}
	for _, d := range rec.delays {
		if d < 0 || d > time.Minute {
			t.Fatalf("implausible dispatch delay %s", d)
		}
	}
	// a->d failed, a->e failed, c->d success, b->d failed (cancelled).
	if rec.outcomes["success"] != 1 || rec.outcomes["failed"] != 3 {
		t.Fatalf("resolved by outcome %v, want 1 success and 3 failed", rec.outcomes)
	}
	if rec.decisions[ffdtype.DecisionSatisfied] != 1 || rec.decisions[ffdtype.DecisionImpossible] != 1 {
		t.Fatalf("decisions %v, want one of each", rec.decisions)
	}
	if rec.siblings != 1 {
		t.Fatalf("%d siblings cancelled, want 1", rec.siblings)
	}
}
