package store_test

import (
	"testing"

	"github.com/flowfabric/ffd/internal/store"
)

// A statement that renews, suspends, retries or ends one execution finds
// it by its primary key whatever the statistics say. Under statistics
// gathered while nothing was running, a renewal written with
// state = 'running' was planned through ff_execution_lease_expiry (a
// partial index of every running row) and read them all, once per
// heartbeat.
func TestFencedLookupsSurviveStatistics(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	b.insert("busy", "completed", 20000)
	b.exec(`ANALYZE ff_execution`)
	b.insert("busy", "running", 20000)
	for _, c := range []struct {
		name, prepare, execute string
	}{
		{"a renewal", `PREPARE planned(smallint, uuid, bigint, text) AS ` + store.RenewSQL,
			`EXECUTE planned(1, '00000000-0000-0000-0000-000000000001', 1, 'renewed')`},
		{"a suspension", `PREPARE planned(smallint, uuid, bigint, text, text, timestamptz, timestamptz, float8) AS ` +
			store.SuspendSQL,
			`EXECUTE planned(1, '00000000-0000-0000-0000-000000000001', 1, 'signal', 'go', NULL, NULL, NULL)`},
		{"a retry", `PREPARE planned(smallint[], uuid[], bigint[], text[], text, boolean, boolean, boolean, text, int[]) AS ` +
			store.RequeueSQL,
			`EXECUTE planned('{1}', '{00000000-0000-0000-0000-000000000001}', '{1}', '{boom}', 'failed', false, true, false, '', '{0}')`},
		{"an expiry", `PREPARE planned(smallint[], uuid[], bigint[], text[], bytea[], text[], text[], text[], text[], text[]) AS ` +
			store.TerminateSQL,
			`EXECUTE planned('{1}', '{00000000-0000-0000-0000-000000000001}', '{1}', '{expired}', '{NULL}', '{lapsed}', '{NULL}', '{NULL}', '{expired}', '{expired}')`},
		{"a cancel", `PREPARE planned(smallint[], uuid[], bigint[], text[], bytea[], text[], text[], text[], text[], text[]) AS ` +
			store.TerminateSQL,
			`EXECUTE planned('{1}', '{00000000-0000-0000-0000-000000000001}', '{0}', '{cancelled}', '{NULL}', '{NULL}', '{no}', '{me}', '{cancelled}', '{revoked}')`},
	} {
		for _, mode := range []string{customPlan, `SET LOCAL plan_cache_mode = force_generic_plan`} {
			plan, raw := b.explain(mode, c.prepare, c.execute)
			var reads []string
			plan.find(func(n *planNode) bool {
				if n.RelationName == "ff_execution" && n.NodeType != "ModifyTable" {
					reads = append(reads, n.NodeType+" "+n.IndexName)
				}
				return false
			})
			for _, r := range reads {
				if r != "Index Scan ff_execution_pkey" {
					t.Errorf("%s, %s: want ff_execution read by its primary key only, got %v: %s", c.name, mode, reads, raw)
					break
				}
			}
			if len(reads) == 0 {
				t.Errorf("%s, %s: no read of ff_execution in the plan: %s", c.name, mode, raw)
			}
		}
	}
}
