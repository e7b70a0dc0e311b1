package cascade_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
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
		f.expect(g, map[string]ffdtype.State{"y": ffdtype.StatePending})
	}
	f.expect(held, map[string]ffdtype.State{"b": ffdtype.StateBlocked})

	// The holder goes (a frozen process killed); the held event is still
	// undispatched, and a sweep-like batch takes it.
	if err := frozen.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	r, err := d.DispatchBatch(f.Ctx, 100, 0)
	if err != nil || r.Events != 1 {
		t.Fatalf("after the holder left: %+v, %v; want the held event dispatched", r, err)
	}
	f.expect(held, map[string]ffdtype.State{"b": ffdtype.StatePending})
}

// A held sibling delays only its own group: sibling cancellation gives up
// on a group whose siblings another transaction holds after the lock
// timeout, moves it to the back of the queue, cancels the groups behind
// it, and cancels the held one once the holder is gone.
func TestAHeldSiblingGroupDelaysOnlyItself(t *testing.T) {
	t.Parallel()
	f := setup(t)
	race := map[string]ffdtype.Policy{"j": {Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.CancelRemaining}}
	held := f.submit(race, "a1->j", "a2->j")
	free := f.submit(race, "b1->j", "b2->j")
	d := cascade.New(f.Pool, nil)
	d.SetLockTimeout(200 * time.Millisecond)
	// The held flow's group is queued first, so it is the one taken first.
	f.run(held, "a1", true)
	if _, err := d.DispatchBatch(f.Ctx, 100, 0); err != nil {
		t.Fatal(err)
	}
	f.run(free, "b1", true)
	if _, err := d.DispatchBatch(f.Ctx, 100, 0); err != nil {
		t.Fatal(err)
	}
	frozen, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback(context.Background())
	if _, err := frozen.Exec(f.Ctx, `SELECT 1 FROM ff_execution WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
		held.x["a2"].ID.Partition, held.x["a2"].ID.UUID); err != nil {
		t.Fatal(err)
	}
	groups, n, err := d.CancelSiblings(f.Ctx, 10)
	var he *cascade.HeldError
	if !errors.As(err, &he) || he.Flows != 1 || groups != 1 || n != 1 {
		t.Fatalf("sibling cancellation with one held sibling: %d groups, %d cancelled, %v; want the free group's sibling cancelled and the held group reported", groups, n, err)
	}
	f.expect(free, map[string]ffdtype.State{"b2": ffdtype.StateCancelled})
	f.expect(held, map[string]ffdtype.State{"a2": ffdtype.StatePending})

	if err := frozen.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if groups, n, err := d.CancelSiblings(f.Ctx, 10); err != nil || groups != 1 || n != 1 {
		t.Fatalf("after the holder left: %d groups, %d cancelled, %v; want the held group's sibling cancelled", groups, n, err)
	}
	f.expect(held, map[string]ffdtype.State{"a2": ffdtype.StateCancelled})
}
