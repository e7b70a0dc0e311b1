package ffd_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/flowfabric/ffd"
)

// heldWorker starts a worker of cfg whose handler reports each execution
// it starts and returns {"ok":true} once release is closed.
func (f *fixture) heldWorker(cfg ffd.WorkerConfig) (started <-chan *ffd.Execution, release chan struct{}) {
	f.T.Helper()
	starts, release := make(chan *ffd.Execution, 1), make(chan struct{})
	cfg.Handler = func(_ context.Context, j *ffd.Job) ([]byte, error) {
		starts <- j.Execution
		<-release
		return []byte(`{"ok":true}`), nil
	}
	f.startWorker(cfg)
	return starts, release
}

// claimedBy waits for the held worker's handler to start and returns
// what it started.
func (f *fixture) claimedBy(started <-chan *ffd.Execution) *ffd.Execution {
	f.T.Helper()
	select {
	case x := <-started:
		return x
	case <-time.After(time.Minute):
		f.T.Fatal("the handler did not start within a minute")
		return nil
	}
}

// holdRow locks x's row in a transaction of the test's own until the
// returned release is called: every renewal and completion of x waits.
func (f *fixture) holdRow(x *ffd.Execution) (release func()) {
	f.T.Helper()
	tx, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		f.T.Fatal(err)
	}
	if _, err := tx.Exec(f.Ctx, `SELECT 1 FROM ff_execution WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
		x.ID.Partition, x.ID.UUID); err != nil {
		f.T.Fatal(err)
	}
	var once sync.Once
	done := func() error {
		err := error(nil)
		once.Do(func() { err = tx.Commit(context.WithoutCancel(f.Ctx)) })
		return err
	}
	// A test that fails while it holds the row must not leave the
	// worker's Stop waiting behind the lock.
	f.T.Cleanup(func() { _ = done() })
	return func() {
		if err := done(); err != nil {
			f.T.Fatal(err)
		}
	}
}

// lockWaiters counts the sessions of the test's database waiting for a
// row lock.
func (f *fixture) lockWaiters() int {
	return f.Count(`SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`)
}

// A renewal that waits on a slow database longer than a heartbeat
// interval, but less than the lease's TTL, still keeps the lease: it is
// bounded by the TTL, not cut at the interval (which failed the
// heartbeat and closed its connection, the start of a reconnect storm on
// a loaded machine).
func TestSlowRenewalKeepsTheLease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	logs := f.logsAt(zapcore.WarnLevel)
	const ttl = 12 * time.Second // a heartbeat every 4 s
	started, release := f.heldWorker(ffd.WorkerConfig{Lanes: []string{"slow"}})
	x := f.mustCreate(ffd.CreateParams{Lane: "slow", LeaseTTL: ttl})
	claimed := f.claimedBy(started)
	// Hold the row from the claim until past two heartbeat intervals
	// (the first renewal waits 5 s, more than an interval) and short of
	// the TTL, so that the lease is kept only if the renewal may wait.
	unlock := f.holdRow(x)
	f.WaitFor("the first renewal to wait for the row lock", func() bool { return f.lockWaiters() == 1 })
	time.Sleep(time.Until((*claimed.LeaseExpiresAt).Add(-ttl / 4)))
	unlock()
	f.WaitFor("the renewal to land", func() bool {
		return f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'renewed'`, x.ID.UUID) >= 1
	})
	close(release)
	f.WaitFor("the execution to complete", func() bool {
		got, err := f.client.Get(f.Ctx, x.ID)
		return err == nil && got.State == ffd.StateCompleted
	})
	got, _ := f.client.Get(f.Ctx, x.ID)
	if got.Attempt != 1 || got.LeaseEpoch != claimed.LeaseEpoch {
		t.Fatalf("completed at attempt %d epoch %d, want the first claim's (attempt 1, epoch %d)", got.Attempt, got.LeaseEpoch, claimed.LeaseEpoch)
	}
	if n := logs.FilterMessage("heartbeat failed; will retry").Len(); n != 0 {
		t.Fatalf("%d heartbeats failed while the row was locked for less than the lease's TTL; want 0 (the renewal waits up to the TTL)", n)
	}
}

// A completion whose connection is cut while it commits (an operator's
// pg_terminate_backend, a restart, a deadline) is tried again until it
// is recorded, the lease kept meanwhile: a handler's success is never
// dropped for a transient fault.
func TestResultOutlivesACutCommit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	logs := f.logsAt(zapcore.WarnLevel)
	started, release := f.heldWorker(ffd.WorkerConfig{Lanes: []string{"cut"}, CompletionLockTimeout: time.Hour})
	x := f.mustCreate(ffd.CreateParams{Lane: "cut", LeaseTTL: time.Minute})
	claimed := f.claimedBy(started)
	unlock := f.holdRow(x)
	close(release)
	for cut := 1; cut <= 2; cut++ {
		// Each cut a session of its own: a terminated backend lingers a
		// moment in pg_stat_activity, still waiting, and must not be
		// counted (or cut) twice.
		f.WaitFor("the completion to wait for the row lock", func() bool { return f.lockWaiters() == 1 })
		var pid int
		if err := f.Pool.QueryRow(f.Ctx, `SELECT pid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatalf("cut %d: %v", cut, err)
		}
		if n := f.Count(`SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity WHERE pid = $1`, pid); n != 1 {
			t.Fatalf("cut %d: terminated %d sessions waiting for the lock, want 1", cut, n)
		}
		f.WaitFor("the cut session to end", func() bool {
			return f.Count(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid) == 0
		})
	}
	unlock()
	f.WaitFor("the result to be recorded after two cut commits", func() bool {
		got, err := f.client.Get(f.Ctx, x.ID)
		return err == nil && got.State == ffd.StateCompleted
	})
	got, _ := f.client.Get(f.Ctx, x.ID)
	if got.Attempt != 1 || got.LeaseEpoch != claimed.LeaseEpoch || string(got.Result) != `{"ok":true}` {
		t.Fatalf("completed at attempt %d epoch %d with %s; want the first claim's result (attempt 1, epoch %d)",
			got.Attempt, got.LeaseEpoch, got.Result, claimed.LeaseEpoch)
	}
	if n := logs.FilterMessage("record completions failed; retrying, the leases kept meanwhile").Len(); n < 2 {
		t.Fatalf("%d retries logged after two cut commits, want at least 2", n)
	}
}
