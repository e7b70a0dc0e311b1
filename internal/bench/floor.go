package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc/pool"
)

// floor: the least a durable Postgres queue can do per execution, as the
// yardstick ffd and its peer are measured against. One table of the
// shape every such queue has, preloaded with Executions pending rows;
// FloorLoops loops, each claiming up to FloorBatch rows with one UPDATE
// over a SKIP LOCKED pick, then marking them done with one UPDATE by id.
// Two statements per batch, two row updates per execution, nothing else:
// no events, no attempts, no handler, no daemon, no NOTIFY.
//
// The table is the run's own (named after its namespace) and dropped
// afterwards; the SQL is here, not in the store, because it is not ffd's.
func floor(ctx context.Context, env *Env, p Params, r *Report) error {
	f, err := env.floor(ctx, p)
	if err != nil {
		return err
	}
	r.Figures["executions_per_second"] = f.Rate
	r.Figures["wall_seconds"] = f.Wall.Seconds()
	r.Figures["loops"], r.Figures["batch"] = p.FloorLoops, p.FloorBatch
	if f.HasDB {
		r.Figures["db_us_per_execution"] = f.DBus
	}
	return nil
}

// floorTable is the floor's DDL: the columns a durable queue keeps per
// execution and the one partial index its claim reads.
const floorTable = `CREATE TABLE %[1]s (
	id bigserial PRIMARY KEY,
	state smallint NOT NULL DEFAULT 0,
	run_at timestamptz NOT NULL DEFAULT now(),
	lease_until timestamptz,
	attempt int NOT NULL DEFAULT 0,
	payload jsonb NOT NULL DEFAULT '{}',
	result jsonb);
CREATE INDEX %[2]s ON %[1]s (run_at, id) WHERE state = 0`

// floorClaim takes up to $1 due rows; floorDone finishes the ids in $1.
const (
	floorClaim = `UPDATE %[1]s SET state = 1, attempt = attempt + 1, lease_until = now() + interval '30 seconds'
	WHERE id IN (SELECT id FROM %[1]s WHERE state = 0 AND run_at <= now()
		ORDER BY run_at, id LIMIT $1 FOR UPDATE SKIP LOCKED)
	RETURNING id`
	floorDone = `UPDATE %[1]s SET state = 2, lease_until = NULL, result = '{}' WHERE id = ANY($1)`
)

// floor measures the floor once: Executions rows drained by the loops.
func (e *Env) floor(ctx context.Context, p Params) (workFigures, error) {
	f := workFigures{Worker: p.FloorLoops, N: p.Executions}
	table, index := pgx.Identifier{"floor_" + e.Namespace}.Sanitize(), pgx.Identifier{"floor_" + e.Namespace + "_due"}.Sanitize()
	if _, err := e.Pool.Exec(ctx, fmt.Sprintf(floorTable, table, index)); err != nil {
		return f, fmt.Errorf("create the floor's table: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = e.Pool.Exec(dctx, "DROP TABLE IF EXISTS "+table)
	}()
	if _, err := e.Pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (run_at) SELECT now() - interval '1 second' FROM generate_series(1, $1)`, table), p.Executions); err != nil {
		return f, fmt.Errorf("preload the floor's table: %w", err)
	}
	if _, err := e.Pool.Exec(ctx, "ANALYZE "+table); err != nil {
		return f, fmt.Errorf("analyze the floor's table: %w", err)
	}
	time.Sleep(1100 * time.Millisecond) // as the throughput scenario lets its set-up settle
	db0, hasDB := e.dbTime(ctx)
	claim, done := fmt.Sprintf(floorClaim, table), fmt.Sprintf(floorDone, table)
	start := time.Now()
	g := pool.New().WithContext(ctx).WithCancelOnError()
	for range p.FloorLoops {
		g.Go(func(ctx context.Context) error { return e.floorLoop(ctx, claim, done, p.FloorBatch) })
	}
	if err := g.Wait(); err != nil {
		return f, err
	}
	f.Wall = time.Since(start)
	if db1, _ := e.dbTime(ctx); hasDB {
		f.HasDB, f.DBus = true, float64((db1-db0).Microseconds())/float64(p.Executions)
	}
	var left int
	if err := e.Pool.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM %s WHERE state <> 2`, table)).Scan(&left); err != nil {
		return f, err
	}
	if left != 0 {
		return f, fmt.Errorf("the floor left %d of %d rows unfinished", left, p.Executions)
	}
	f.Rate = float64(p.Executions) / f.Wall.Seconds()
	return f, nil
}

// floorLoop claims and finishes batches until a claim finds nothing.
func (e *Env) floorLoop(ctx context.Context, claim, done string, batch int) error {
	ids := make([]int64, 0, batch)
	for {
		rows, err := e.Pool.Query(ctx, claim, batch)
		if err != nil {
			return fmt.Errorf("floor claim: %w", err)
		}
		ids = ids[:0]
		var id int64
		_, err = pgx.ForEachRow(rows, []any{&id}, func() error { ids = append(ids, id); return nil })
		if err != nil {
			return fmt.Errorf("floor claim: %w", err)
		}
		if len(ids) == 0 {
			return nil
		}
		tag, err := e.Pool.Exec(ctx, done, ids)
		if err != nil {
			return fmt.Errorf("floor done: %w", err)
		}
		if tag.RowsAffected() != int64(len(ids)) {
			return fmt.Errorf("floor done: %d of %d rows finished", tag.RowsAffected(), len(ids))
		}
	}
}
