package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The statements of a flow member's completion and of its dispatch read
// by key on their generic plans, however small their tables were when
// the plans were made. With plan_cache_mode alone the planner read
// ff_execution and ff_edge_group whole (a sequential scan, or a hash
// join over one), and a chain's completions and dispatches slowed as
// their tables grew until the next ANALYZE (docs/benchmarks.md).
func TestHotPlansReadByKey(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	// A connection makes its generic plan at its first calls and keeps it
	// until the tables' statistics change: planned over a few flows, as at
	// a new install's first flows, a plan that reads a table whole reads
	// it whole at every call as it grows.
	b.exec(`INSERT INTO ff_flow (partition_key, flow_id) SELECT i::smallint, gen_random_uuid() FROM generate_series(1, 3) i`)
	b.exec(`INSERT INTO ff_execution (partition_key, execution_id, flow_id, namespace, lane, state, attempt, lease_epoch)
		SELECT f.partition_key, gen_random_uuid(), f.flow_id, 'plan', 'flows', 'blocked', 0, 0
		FROM ff_flow f, generate_series(1, 4)`)
	b.exec(`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, total)
		SELECT partition_key, flow_id, execution_id, 1 FROM ff_execution`)
	b.exec(`ANALYZE ff_flow, ff_execution, ff_edge_group`)
	const one = `'{7}', '{00000000-0000-0000-0000-000000000001}'`
	for _, c := range []struct{ name, prepare, execute string }{
		{"finishing flows", `PREPARE planned AS ` + store.FinishFlowsSQL, `EXECUTE planned`},
		{"making downstreams ready", `PREPARE planned(smallint[], uuid[]) AS ` + store.ReadySQL, `EXECUTE planned(` + one + `)`},
		{"deciding groups", `PREPARE planned(smallint[], uuid[], uuid[], text[]) AS ` + store.DecideSQL,
			`EXECUTE planned(` + one + `, '{00000000-0000-0000-0000-000000000002}', '{satisfied}')`},
	} {
		plan, raw := b.explain(store.HotPlansSQL, c.prepare, c.execute)
		if plan.find(func(n *planNode) bool { return n.NodeType == "Seq Scan" }) != nil {
			t.Errorf("%s: want every table read by key, no sequential scan; got %s", c.name, raw)
		}
	}
}

// The dispatch's take sets, for the rest of its transaction, what
// store.HotPlansSQL sets for a worker's: the statements that follow it
// (the groups' locks, the edges' resolve, the decisions, the flows'
// finish) plan by key.
func TestTakeSetsHotPlans(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, attempt, namespace)
		VALUES (7, gen_random_uuid(), gen_random_uuid(), 'success', 1, 'plan') RETURNING event_id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	taken, err := store.TakeEvents(ctx, tx, []int64{id}, time.Second)
	if err != nil || len(taken) != 1 {
		t.Fatalf("take event %d: %d taken, %v; want it", id, len(taken), err)
	}
	var got [3]string
	if err := tx.QueryRow(ctx, `SELECT current_setting('plan_cache_mode'), current_setting('enable_seqscan'),
		current_setting('enable_bitmapscan')`).Scan(&got[0], &got[1], &got[2]); err != nil {
		t.Fatal(err)
	}
	if want := [3]string{"force_generic_plan", "off", "off"}; got != want {
		t.Fatalf("after the take: plan_cache_mode, enable_seqscan, enable_bitmapscan = %v; want %v", got, want)
	}
}
