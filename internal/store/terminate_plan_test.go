package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The ending of held leases (a worker's completions) updates its rows
// without locking them first, so the order in which it updates them is
// the plan's: it must be the sorted input's, the global lock order, or
// two batches could deadlock. On its generic plan it must be a nested
// loop driven by the input (sorted, on the outer side) with one probe
// of the primary key per row inside. Checked under statistics that
// misled the planner: gathered on an empty table, and over rows that
// were all finished (when the fence tested the state against a
// constant, the planner then read every running row in a merge join,
// or ran the whole input once per running row with the table outside:
// out of the lock order), and over rows that were all running.
func TestTerminatePlanSurvivesStatistics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	insert := func(state string) {
		t.Helper()
		exec(`INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state, attempt, lease_epoch,
				lease_owner, lease_expires_at, started_at, attempt_worker, attempt_started_at, terminal_at)
			SELECT (random() * 255)::int, gen_random_uuid(), 'plan', 'busy', '` + state + `', 1, 1,
				CASE WHEN '` + state + `' = 'running' THEN 'w/1' END,
				CASE WHEN '` + state + `' = 'running' THEN now() + interval '1 minute' END,
				now(), 'w/1', now(), CASE WHEN '` + state + `' = 'running' THEN NULL ELSE now() END
			FROM generate_series(1, 20000)`)
	}
	check := func(when string) {
		t.Helper()
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `PREPARE held_plan(smallint[], uuid[], bigint[], text[], bytea[], text[], text[], text[], text[], text[]) AS `+
			store.TerminateHeldSQL); err != nil {
			t.Fatalf("prepare the ending: %v", err)
		}
		defer conn.Exec(ctx, `DEALLOCATE held_plan; RESET plan_cache_mode`)
		if _, err := conn.Exec(ctx, `SET plan_cache_mode = force_generic_plan`); err != nil {
			t.Fatal(err)
		}
		var raw []byte
		if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE held_plan('{1,2}', '{`+
			`00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}', '{1,1}', '{completed,failed}',
			'{"",NULL}', '{NULL,boom}', '{NULL,NULL}', '{NULL,NULL}', '{success,failed}', '{released,released}')`).Scan(&raw); err != nil {
			t.Fatalf("explain the ending: %v", err)
		}
		var plans []struct{ Plan planNode }
		if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
			t.Fatalf("parse the plan: %v", err)
		}
		update := plans[0].Plan.find(func(n *planNode) bool {
			return n.NodeType == "ModifyTable" && n.RelationName == "ff_execution"
		})
		if update == nil || len(update.Plans) != 1 {
			t.Fatalf("%s: no update of ff_execution with one input in the plan: %s", when, raw)
		}
		join := &update.Plans[0]
		var outer, inner *planNode
		for i := range join.Plans {
			switch join.Plans[i].Parent {
			case "Outer":
				outer = &join.Plans[i]
			case "Inner":
				inner = &join.Plans[i]
			}
		}
		if join.NodeType != "Nested Loop" || outer == nil || inner == nil ||
			outer.find(func(n *planNode) bool { return n.RelationName == "ff_execution" }) != nil ||
			outer.find(func(n *planNode) bool { return n.NodeType == "Sort" }) == nil ||
			outer.find(func(n *planNode) bool { return n.NodeType == "Function Scan" }) == nil ||
			inner.NodeType != "Index Scan" || inner.IndexName != "ff_execution_pkey" {
			t.Errorf("%s: want a nested loop, the sorted input outside and a probe of ff_execution_pkey inside; got %s", when, raw)
		}
	}
	exec(`ANALYZE ff_execution`) // statistics of an empty table
	insert("running")
	check("statistics gathered on an empty table")
	exec(`TRUNCATE ff_execution CASCADE`)
	insert("completed")
	exec(`ANALYZE ff_execution`)
	insert("running")
	check("statistics gathered while nothing was running")
	exec(`ANALYZE ff_execution`)
	check("statistics gathered over 20,000 running rows")
}
