package store_test

import (
	"strings"
	"testing"

	"github.com/flowfabric/ffd/internal/store"
)

// The ending of held leases (a worker's completions) updates its rows
// without locking them first, so the order in which it updates them is
// the plan's: it must be the sorted input's, the global lock order, or
// two batches could deadlock. On its generic plan, under the settings a
// worker's completions run with (store.HotPlansSQL), it must be a nested
// loop driven by the input (sorted, on the outer side) with one probe
// of the primary key per row inside. Checked under statistics that
// misled the planner: gathered on an empty table, and over rows that
// were all finished (when the fence tested the state against a
// constant, the planner then read every running row in a merge join,
// or ran the whole input once per running row with the table outside:
// out of the lock order), and over rows that were all running.
func TestTerminatePlanSurvivesStatistics(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	check := func(when string, mergeToo bool) {
		t.Helper()
		plan, raw := b.explain(store.HotPlansSQL, // what a worker's completions run under
			`PREPARE planned(smallint[], uuid[], bigint[], text[], bytea[], text[], text[], text[], text[], text[]) AS `+
				store.TerminateHeldSQL,
			`EXECUTE planned('{1,2}', '{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000002}',
				'{1,1}', '{completed,failed}', '{"",NULL}', '{NULL,boom}', '{NULL,NULL}', '{NULL,NULL}',
				'{success,failed}', '{released,released}')`)
		update := plan.find(func(n *planNode) bool { return n.NodeType == "ModifyTable" && n.RelationName == "ff_execution" })
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
		sortedInput := outer != nil && inner != nil &&
			outer.find(func(n *planNode) bool { return n.RelationName == "ff_execution" }) == nil &&
			outer.find(func(n *planNode) bool { return n.NodeType == "Sort" }) != nil &&
			outer.find(func(n *planNode) bool { return n.NodeType == "Function Scan" }) != nil
		probed := join.NodeType == "Nested Loop" && inner != nil && inner.NodeType == "Index Scan" && inner.IndexName == "ff_execution_pkey"
		inKeyOrder := join.NodeType == "Merge Join" &&
			strings.HasPrefix(join.MergeCond, "((l.partition_key = e.partition_key) AND (l.execution_id = e.execution_id)")
		if !sortedInput || !(probed || mergeToo && inKeyOrder) {
			t.Errorf("%s: want a nested loop, the sorted input outside and a probe of ff_execution_pkey inside (or, with the table "+
				"taken for empty, a merge join on the key in its order: %v); got %s", when, mergeToo, raw)
		}
	}
	b.exec(`ANALYZE ff_execution`) // statistics of an empty table
	b.insert("busy", "running", 20000)
	check("statistics gathered on an empty table", false)
	b.exec(`TRUNCATE ff_execution CASCADE`)
	b.insert("busy", "completed", 20000)
	b.exec(`ANALYZE ff_execution`)
	b.insert("busy", "running", 20000)
	check("statistics gathered while nothing was running", false)
	b.exec(`ANALYZE ff_execution`)
	check("statistics gathered over 20,000 running rows", false)
	// Statistics gathered with every row deleted and not yet vacuumed:
	// the planner takes the table for empty, and a full scan of its key
	// for one row. It may then merge the input with that scan: in the
	// lock order still, but reading the whole table for every batch
	// until the daemon's statistician reads the refill (migration 00038).
	b.exec(`DELETE FROM ff_execution`)
	b.exec(`ANALYZE ff_execution`)
	b.insert("busy", "running", 20000)
	check("statistics gathered over deleted rows", true)
}
