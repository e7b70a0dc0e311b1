package store_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A statement fenced on one running execution finds it by its primary
// key whatever the statistics say. Under statistics gathered while
// nothing was running, a renewal written with state = 'running' was
// planned through ff_execution_lease_expiry (a partial index of every
// running row) and read them all, once per heartbeat.
func TestFencedLookupsSurviveStatistics(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := testdb.New(t).Pool
	insert := func(state string) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state, attempt,
				lease_epoch, lease_owner, lease_expires_at, started_at, attempt_worker, attempt_started_at, terminal_at)
			SELECT (random() * 255)::int, gen_random_uuid(), 'plan', 'busy', $1, 1, 1,
				CASE WHEN $1 = 'running' THEN 'w/1' END, CASE WHEN $1 = 'running' THEN now() + interval '1 minute' END,
				now(), 'w/1', now(), CASE WHEN $1 = 'running' THEN NULL ELSE now() END
			FROM generate_series(1, 20000)`, state); err != nil {
			t.Fatalf("insert %s rows: %v", state, err)
		}
	}
	insert("completed")
	if _, err := pool.Exec(ctx, `ANALYZE ff_execution`); err != nil {
		t.Fatal(err)
	}
	insert("running")
	for _, c := range []struct {
		name, prepare, execute string
	}{
		{"a renewal", `PREPARE fenced(smallint, uuid, bigint, text) AS ` + store.RenewSQL,
			`EXECUTE fenced(1, '00000000-0000-0000-0000-000000000001', 1, 'renewed')`},
		{"a suspension", `PREPARE fenced(smallint, uuid, bigint, text, text, timestamptz, timestamptz, float8) AS ` + store.SuspendSQL,
			`EXECUTE fenced(1, '00000000-0000-0000-0000-000000000001', 1, 'signal', 'go', NULL, NULL, NULL)`},
	} {
		for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var raw []byte
			_, err = conn.Exec(ctx, `SET plan_cache_mode = `+mode)
			if err == nil {
				_, err = conn.Exec(ctx, c.prepare)
			}
			if err == nil {
				err = conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+c.execute).Scan(&raw)
			}
			conn.Exec(ctx, `DEALLOCATE fenced; RESET plan_cache_mode`)
			conn.Release()
			if err != nil {
				t.Fatalf("%s, %s: explain: %v", c.name, mode, err)
			}
			var plans []struct{ Plan planNode }
			if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
				t.Fatalf("parse the plan: %v", err)
			}
			var reads []string
			plans[0].Plan.find(func(n *planNode) bool {
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
