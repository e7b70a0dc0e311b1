package cascade_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/store"
)

// racePool is a pool of the test's own, tagged so that the test can wait
// for its backends to exit: a backend reports its deadlock count to
// pg_stat_database when it exits at the latest.
func (f *fixture) racePool() *pgxpool.Pool {
	f.T.Helper()
	cfg, err := pgxpool.ParseConfig(f.DB.URL)
	if err != nil {
		f.T.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "lock-order-race"
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	return pool
}

// deadlocks closes pool, waits for its backends to exit, and returns the
// database's deadlock count.
func (f *fixture) deadlocks(pool *pgxpool.Pool) int64 {
	f.T.Helper()
	pool.Close()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var left int
		if err := f.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'lock-order-race'`).Scan(&left); err != nil {
			f.T.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("%d race backends still connected", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var n int64
	if err := f.Pool.QueryRow(f.Ctx, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		f.T.Fatal(err)
	}
	return n
}

// A dispatch holds the downstream's group and then, finishing the flow,
// wants the flow row; SetEdgeGroupPolicy on that downstream must wait for
// the group without holding the flow, or the two deadlock. The dispatch
// is paused right after its group lock until the policy change is seen
// waiting, so the interleaving that deadlocked is forced every time.
func TestSetPolicyWaitsForTheGroupBeforeTheFlow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(nil, "up->down")
	f.run(g, "up", false)
	pool := f.racePool()

	tx, err := pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	// The dispatch's first lock: the downstream's group.
	if _, err := tx.Exec(f.Ctx, `SELECT 1 FROM ff_edge_group WHERE flow_id = $1 FOR NO KEY UPDATE`, g.flow.ID); err != nil {
		t.Fatal(err)
	}
	setErr := make(chan error, 1)
	go func() {
		_, err := flows.SetPolicy(f.Ctx, pool, g.flow.ID, g.x["down"].ID, ffdtype.Policy{Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.LetRun})
		setErr <- err
	}()
	f.waitForLockWaiters(1)
	// The rest of the dispatch: resolve the failed upstream's edge, which
	// skips the downstream and, as it was the last live member, finishes
	// the flow under the flow row's lock.
	if _, err := flows.Resolve(f.Ctx, tx, []store.Resolution{{Upstream: g.x["up"].ID, Outcome: "failed"}}, true); err != nil {
		t.Fatalf("resolve while a policy change waits: %v", err)
	}
	if err := tx.Commit(f.Ctx); err != nil {
		t.Fatal(err)
	}
	err = <-setErr
	// The policy change comes second: the flow has finished, or the edge
	// fixed the policy; either refusal is typed.
	if !errors.Is(err, ffdtype.ErrAlreadyTerminal) && !errors.Is(err, ffdtype.ErrConflict) {
		t.Fatalf("policy change after the dispatch: want a refusal (terminal flow or fixed policy), got %v", err)
	}
	if n := f.deadlocks(pool); n != 0 {
		t.Fatalf("deadlocks in pg_stat_database: %d, want 0", n)
	}
	if got := f.state(g, "down"); got != ffdtype.StateSkipped {
		t.Fatalf("down is %s, want skipped", got)
	}
}

// waitForLockWaiters waits until n backends of the race pool wait on a
// row lock.
func (f *fixture) waitForLockWaiters(n int) {
	f.T.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		var waiting int
		if err := f.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'lock-order-race' AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			f.T.Fatal(err)
		}
		if waiting >= n {
			return
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("%d backends wait on a lock, want %d", waiting, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Policy changes racing real dispatches over many flows: every flow ends
// as its structure implies and Postgres detects no deadlock.
func TestPolicyChangesRacingDispatchNeverDeadlock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 40
	dags := make([]*dag, n)
	for i := range dags {
		// Two upstreams so that policy changes keep finding a group whose
		// edges are staged: each is refused, but only after its locks.
		dags[i] = f.submit(nil, "a->join", "b->join")
	}
	for _, g := range dags {
		f.run(g, "a", false)
		f.run(g, "b", true)
	}
	pool := f.racePool()
	d := cascade.New(pool, nil)
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for _, g := range dags {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 3 {
				_, err := flows.SetPolicy(f.Ctx, pool, g.flow.ID, g.x["join"].ID, ffdtype.Policy{Kind: ffdtype.Quorum, K: 1, OnSatisfied: ffdtype.LetRun})
				if err != nil && !errors.Is(err, ffdtype.ErrConflict) && !errors.Is(err, ffdtype.ErrAlreadyTerminal) {
					errs <- fmt.Errorf("set policy: %w", err)
				}
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := d.DispatchBatch(f.Ctx, 4, 0); err != nil {
				errs <- fmt.Errorf("dispatch: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	f.drain()
	for i, g := range dags {
		if got := f.state(g, "join"); got != ffdtype.StateSkipped {
			t.Errorf("dag %d: join is %s, want skipped (all_of with a failed upstream)", i, got)
		}
	}
	if got := f.deadlocks(pool); got != 0 {
		t.Fatalf("deadlocks in pg_stat_database: %d, want 0", got)
	}
}
