package ffd_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// A worker claims each of its lanes in a loop of its own: a lane whose
// claim is slow (a controlled lane on a distributed Postgres takes a
// dozen statements; here a capped lane whose row another transaction
// holds, so its claim waits) does not delay the claims of another lane.
// With one claim loop serving the lanes in turn, the plain lane's work
// would wait for the capped lane's claim to end.
func TestSlowLaneDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.SetLaneLimit(f.Ctx, "lanes-slow", 10, ffd.NewLane()); err != nil {
		t.Fatal(err)
	}
	// The worker's own pool waits for locks as long as they are held, so
	// the capped lane's claim waits until the test lets it go.
	guard := ffd.DefaultSessionConfig()
	guard.LockTimeout = 0
	pool, err := ffd.NewPool(f.Ctx, f.DB.URL, &guard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	hold, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.WithoutCancel(f.Ctx)) //nolint:errcheck // released below; this is for a failure
	if _, err := hold.Exec(f.Ctx, `SELECT 1 FROM ff_lane_room WHERE lane = 'lanes-slow' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	f.mustCreate(ffd.CreateParams{Lane: "lanes-slow"})
	var fast atomic.Int64
	w, err := ffd.NewWorker(c, ffd.WorkerConfig{Lanes: []string{"lanes-slow", "lanes-fast"}, Concurrency: 4,
		Handler: func(_ context.Context, j *ffd.Job) ([]byte, error) {
			if j.Lane == "lanes-fast" {
				fast.Add(1)
			}
			return nil, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(f.Ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	var pid int
	var since time.Time
	f.WaitFor("the capped lane's claim to wait for the lane's room", func() bool {
		err := f.Pool.QueryRow(f.Ctx, `SELECT pid, query_start FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%FROM ff_lane_room%'`).Scan(&pid, &since)
		return err == nil
	})
	for range 8 {
		f.mustCreate(ffd.CreateParams{Lane: "lanes-fast"})
	}
	f.WaitFor("the plain lane's 8 executions to run while the capped lane's claim waits", func() bool { return fast.Load() == 8 })
	var still time.Time
	if err := f.Pool.QueryRow(f.Ctx, `SELECT query_start FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, pid).Scan(&still); err != nil || !still.Equal(since) {
		t.Fatalf("the capped lane's claim (backend %d, since %s) no longer waits (%v, %s): the plain lane ran only after it", pid, since, err, still)
	}
	if err := hold.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the capped lane's execution to complete once its room is free", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'lanes-slow' AND state = 'completed'`) == 1
	})
}
