package store_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/testdb"
)

// planBench is a database of its own for a test of the plans a statement
// gets under statistics that misled the planner: rows are inserted in
// bulk, statistics gathered at chosen moments, and the statement
// explained under the settings its caller uses.
type planBench struct {
	t    *testing.T
	ctx  context.Context
	pool *pgxpool.Pool
}

// newPlanBench is a planBench on a fresh database, bounded by a minute.
func newPlanBench(t *testing.T) *planBench {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return &planBench{t: t, ctx: ctx, pool: testdb.New(t).Pool}
}

// exec runs sql or fails the test.
func (b *planBench) exec(sql string) {
	b.t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql); err != nil {
		b.t.Fatalf("%s: %v", sql, err)
	}
}

// insert adds n executions of lane in state (pending, running or a
// terminal one), each as the schema's checks want a row in that state.
func (b *planBench) insert(lane, state string, n int) {
	b.t.Helper()
	if _, err := b.pool.Exec(b.ctx, `INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state,
			attempt, lease_epoch, lease_owner, lease_expires_at, started_at, attempt_worker, attempt_started_at, terminal_at)
		SELECT (random() * 255)::int, gen_random_uuid(), 'plan', $1, $2,
			CASE WHEN $2 = 'pending' THEN 0 ELSE 1 END, CASE WHEN $2 = 'pending' THEN 0 ELSE 1 END,
			CASE WHEN $2 = 'running' THEN 'w/1' END, CASE WHEN $2 = 'running' THEN now() + interval '1 minute' END,
			CASE WHEN $2 = 'pending' THEN NULL ELSE now() END, CASE WHEN $2 = 'pending' THEN NULL ELSE 'w/1' END,
			CASE WHEN $2 = 'pending' THEN NULL ELSE now() END,
			CASE WHEN $2 IN ('pending', 'running') THEN NULL ELSE now() END
		FROM generate_series(1, `+strconv.Itoa(n)+`)`, lane, state); err != nil {
		b.t.Fatalf("insert %d %s executions: %v", n, state, err)
	}
}

// explain prepares statement as `prepare` (a PREPARE of the name
// "planned"), and returns the plan of `execute` (an EXECUTE of it)
// under settings, run in the explaining transaction, as the tree and
// as its JSON.
func (b *planBench) explain(settings, prepare, execute string) (*planNode, []byte) {
	b.t.Helper()
	conn, err := b.pool.Acquire(b.ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(b.ctx, prepare); err != nil {
		b.t.Fatalf("prepare: %v", err)
	}
	defer conn.Exec(b.ctx, `DEALLOCATE planned`)
	var raw []byte
	err = pgx.BeginFunc(b.ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(b.ctx, settings); err != nil {
			return err
		}
		return tx.QueryRow(b.ctx, `EXPLAIN (FORMAT JSON) `+execute).Scan(&raw)
	})
	if err != nil {
		b.t.Fatalf("explain %s under %s: %v", execute, settings, err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) != 1 {
		b.t.Fatalf("parse the plan %s: %v", raw, err)
	}
	return &plans[0].Plan, raw
}

// A custom plan, as a statement in a caller's transaction gets it.
const customPlan = `SET LOCAL plan_cache_mode = force_custom_plan`

type planNode struct {
	NodeType     string     `json:"Node Type"`
	SubplanName  string     `json:"Subplan Name"`
	IndexName    string     `json:"Index Name"`
	RelationName string     `json:"Relation Name"`
	Parent       string     `json:"Parent Relationship"`
	MergeCond    string     `json:"Merge Cond"`
	Plans        []planNode `json:"Plans"`
}

func (n *planNode) find(match func(*planNode) bool) *planNode {
	if match(n) {
		return n
	}
	for i := range n.Plans {
		if m := n.Plans[i].find(match); m != nil {
			return m
		}
	}
	return nil
}
