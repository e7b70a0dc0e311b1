package bench

import (
	"context"
	"errors"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
	"go.uber.org/zap"
)

// enqueueBatch is the CreateMany batch of the enqueue scenario (River's
// InsertManyFast peer uses the same).
const enqueueBatch = 1000

// enqueue: N executions through the public CreateMany in batches, and
// single Create latency over Creates calls in a row.
func enqueue(ctx context.Context, env *Env, p Params, r *Report) error {
	if err := enqueueMany(ctx, env, p, r); err != nil {
		return err
	}
	c, err := env.client()
	if err != nil {
		return err
	}
	lane := env.lane("enqueue")
	hasDB := r.Figures["create_many_db_us_per_execution"] != nil
	lat := make([]time.Duration, 0, p.Creates)
	db0, _ := env.dbTime(ctx)
	for range p.Creates {
		t := time.Now()
		if _, err := c.Create(ctx, ffd.CreateParams{Lane: lane + ".single"}); err != nil {
			return err
		}
		lat = append(lat, time.Since(t))
	}
	db1, _ := env.dbTime(ctx)
	pc := percentiles(lat, 50, 99)
	r.Figures["create_ms"] = map[string]float64{"p50": ms(pc[0]), "p99": ms(pc[1])}
	r.Targets = append(r.Targets, target("create_p99_ms", "<= 10", ms(pc[1]), "ms", ms(pc[1]) <= 10))
	if hasDB {
		r.Figures["create_db_us_per_execution"] = float64((db1 - db0).Microseconds()) / float64(p.Creates)
	}
	n, err := store.CountInLanes(ctx, env.Pool, ffdtype.StatePending, lane, lane+".single")
	if err != nil {
		return err
	}
	if n != p.Executions+p.Creates {
		return errors.New("not every enqueued execution is pending")
	}
	return env.checkInvariants(ctx)
}

// dbTime is the database's execution time so far over the run's database
// (pg_stat_statements, top-level statements), when the extension is
// installed there; false otherwise. Statistics are cumulative, so callers
// subtract two readings; the bench's own queries between them count too.
func (e *Env) dbTime(ctx context.Context) (time.Duration, bool) {
	var ms float64
	// Top-level statements only: a nested one's time is in its caller's
	// already (with pg_stat_statements.track = all, a distributed
	// Postgres's shard statements run locally are nested ones).
	err := e.Pool.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND toplevel`).Scan(&ms)
	if err != nil {
		e.Log.Debug("no database time: pg_stat_statements is not installed in this database", zap.Error(err))
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// enqueueMany: Executions executions through the public CreateMany in
// batches of enqueueBatch.
func enqueueMany(ctx context.Context, env *Env, p Params, r *Report) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	lane := env.lane("enqueue")
	ps := make([]ffd.CreateParams, 0, enqueueBatch)
	db0, hasDB := env.dbTime(ctx)
	start := time.Now()
	for done := 0; done < p.Executions; done += len(ps) {
		ps = ps[:0]
		for range min(enqueueBatch, p.Executions-done) {
			ps = append(ps, ffd.CreateParams{Lane: lane})
		}
		if _, err := c.CreateMany(ctx, ps); err != nil {
			return err
		}
	}
	took := time.Since(start)
	db1, _ := env.dbTime(ctx)
	rate := float64(p.Executions) / took.Seconds()
	r.Figures["create_many_per_second"] = rate
	if hasDB {
		r.Figures["create_many_db_us_per_execution"] = float64((db1 - db0).Microseconds()) / float64(p.Executions)
	}
	return nil
}
