package cascade_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/store"
)

// One frozen process holding a flow's edge group (as a daemon stopped
// inside its dispatch transaction does) delays only that flow: a dispatch
// batch that meets the lock gives up after the lock timeout, dispatches
// the other flows' events one by one, and reports the held event, which
// a later dispatch takes once the holder is gone.
func TestAHeldFlowDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	f := setup(t)
	held := f.submit(nil, "a->b")
	var free []*dag
	for range 4 {
		free = append(free, f.submit(nil, "x->y"))
	}
	// The frozen holder: a transaction that locked held's edge group and
	// stays open.
	frozen, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback(context.Background())
	if _, err := frozen.Exec(f.Ctx, `SELECT 1 FROM ff_edge_group WHERE flow_id = $1 FOR UPDATE`, held.flow.ID); err != nil {
		t.Fatal(err)
	}
	f.run(held, "a", true)
	for _, g := range free {
		f.run(g, "x", true)
	}
	var ids []int64
	if err := f.Pool.QueryRow(f.Ctx, `SELECT array_agg(event_id ORDER BY event_id) FROM ff_completion_event WHERE dispatched_at IS NULL`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	if len(ids) != 5 {
		t.Fatalf("%d undispatched events, want 5", len(ids))
	}

	d := cascade.New(f.Pool, nil)
	d.SetLockTimeout(200 * time.Millisecond)
	start := time.Now()
	res, err := d.DispatchMany(f.Ctx, ids)
	var he *cascade.HeldError
	if !errors.As(err, &he) || he.Events != 1 || he.Flows != 1 {
		t.Fatalf("dispatch with one held flow: %+v, %v; want a HeldError for 1 event of 1 flow", res, err)
	}
	if res.Events != 4 {
		t.Fatalf("dispatched %d events, want the 4 free flows'", res.Events)
	}
	// About two lock timeouts: the batch's, then the held event's alone.
	// (Not asserted: a timing; without the bound the dispatch would wait
	// for the holder, and the HeldError above would not come.)
	t.Logf("the dispatch took %s", time.Since(start))
	for _, g := range free {
		f.expect(g, map[string]store.State{"y": store.StatePending})
	}
	f.expect(held, map[string]store.State{"b": store.StateBlocked})

	// The holder goes (a frozen process killed); the held event is still
	// undispatched, and a sweep-like batch takes it.
	if err := frozen.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	r, err := d.DispatchBatch(f.Ctx, 100, 0)
	if err != nil || r.Events != 1 {
		t.Fatalf("after the holder left: %+v, %v; want the held event dispatched", r, err)
	}
	f.expect(held, map[string]store.State{"b": store.StatePending})
}
