package ffd_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// blockingHandler runs until its context ends and reports each cause.
type blockingHandler struct {
	started chan ffd.ExecutionID
	ended   chan error
}

func newBlockingHandler(n int) *blockingHandler {
	return &blockingHandler{started: make(chan ffd.ExecutionID, n), ended: make(chan error, n)}
}

func (b *blockingHandler) run(ctx context.Context, j *ffd.Job) ([]byte, error) {
	b.started <- j.ID
	<-ctx.Done()
	b.ended <- context.Cause(ctx)
	return nil, context.Cause(ctx)
}

// logOnFailure gives the fixture's client (and the workers made from it)
// a logger whose Info and above the test prints if it fails: which
// notifications came, reconnects, lease re-checks that failed.
func (f *fixture) logOnFailure() {
	f.T.Helper()
	f.logsAt(zapcore.InfoLevel)
}

// logsAt gives the fixture's client (and the workers made from it) a
// logger that keeps entries at level and above, for the test to read
// and to print if it fails.
func (f *fixture) logsAt(level zapcore.Level) *observer.ObservedLogs {
	f.T.Helper()
	core, logs := observer.New(level)
	client, err := ffd.NewClient(f.Pool, &ffd.Config{Logger: zap.New(core)})
	if err != nil {
		f.T.Fatal(err)
	}
	f.client = client
	f.T.Cleanup(func() { // runs after the workers' cleanups have stopped them
		if !f.T.Failed() {
			return
		}
		for _, e := range logs.All() {
			f.T.Logf("%s %s %s %v", e.Time.Format("15:04:05.000"), e.Level, e.Message, e.ContextMap())
		}
	})
	return logs
}

// A cancelled execution's handler learns of it from the lease
// notification, not from its next heartbeat: with an hour-long TTL the
// heartbeat would come in twenty minutes.
func TestCancelReachesTheRunningHandler(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.logOnFailure()
	h := newBlockingHandler(3)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"revoke"}, Handler: h.run, Concurrency: 3})
	ids := map[ffd.ExecutionID]bool{}
	for range 3 {
		ids[f.mustCreate(ffd.CreateParams{Lane: "revoke", LeaseTTL: time.Hour}).ID] = true
	}
	running := map[ffd.ExecutionID]bool{}
	for len(running) < 3 {
		select {
		case id := <-h.started:
			running[id] = true
		case <-time.After(time.Minute):
			t.Fatalf("%d of 3 handlers started", len(running))
		}
	}
	// Cancel one, revoke another (operator), leave the third running.
	var cancelled, revoked, untouched ffd.ExecutionID
	for id := range ids {
		switch {
		case cancelled == (ffd.ExecutionID{}):
			cancelled = id
		case revoked == (ffd.ExecutionID{}):
			revoked = id
		default:
			untouched = id
		}
	}
	if _, err := f.client.Cancel(f.Ctx, cancelled, "user asked", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Revoke(f.Ctx, revoked, "operator"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case cause := <-h.ended:
			if !errors.Is(cause, ffd.ErrLeaseLost) {
				t.Fatalf("handler context cancelled with %v, want ErrLeaseLost", cause)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a handler whose lease was taken away is still running (the heartbeat is twenty minutes away)")
		}
	}
	select {
	case cause := <-h.ended:
		t.Fatalf("the untouched handler was cancelled too: %v", cause)
	default:
	}
	if x, _ := f.client.Get(f.Ctx, untouched); x.State != ffd.StateRunning {
		t.Fatalf("untouched execution is %s, want running", x.State)
	}
}

// An execution revoked back to pending may be claimed again by the same
// worker while its old handler still runs (it has not yet seen the
// revocation, or ignores its context): the two runs are two leases. The
// old run's end must neither free the new run's slot nor hide the new
// lease from a later revocation. (The executor kept one run per
// execution id: the old run's end dropped the new one, whose revocation
// then reached nobody; under load the ff_revoke of a revoke could also
// arrive after the re-claim and be dropped as stale.)
func TestRevokedAndReclaimedRunsAreTwoLeases(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.logOnFailure()
	release := make(chan struct{})
	started := make(chan int64, 4)
	ended := make(chan error, 4)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"reclaim"}, Concurrency: 2, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, j *ffd.Job) ([]byte, error) {
			started <- j.LeaseEpoch
			if j.LeaseEpoch == 1 {
				<-release // the first run ignores its context until released
				return nil, nil
			}
			<-ctx.Done()
			ended <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		}})
	x := f.mustCreate(ffd.CreateParams{Lane: "reclaim", LeaseTTL: time.Hour})
	if e := <-started; e != 1 {
		t.Fatalf("first run at epoch %d, want 1", e)
	}
	if _, err := f.client.Revoke(f.Ctx, x.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-started:
		if e <= 1 {
			t.Fatalf("second run at epoch %d, want a later one than the first's", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the revoked execution was not claimed again beside its stubborn first run")
	}
	close(release) // the first run ends; the second must stay known
	time.Sleep(200 * time.Millisecond)
	if _, err := f.client.Revoke(f.Ctx, x.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-ended:
		if !errors.Is(cause, ffd.ErrLeaseLost) {
			t.Fatalf("second run cancelled with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the second run's lease was revoked but its handler still runs: the first run's end hid it")
	}
}

// A lease revoked while the worker's listener is disconnected sends its
// ff_revoke to nobody; the worker asks about its leases when it listens
// again, so the handler still stops long before its next heartbeat.
func TestRevokeDuringListenerGap(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.logOnFailure()
	h := newBlockingHandler(1)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"gap"}, Handler: h.run, Concurrency: 1})
	x := f.mustCreate(ffd.CreateParams{Lane: "gap", LeaseTTL: time.Hour})
	select {
	case <-h.started:
	case <-time.After(time.Minute):
		t.Fatal("the handler never started")
	}
	// Kill the listener and revoke in one statement, before the listener
	// can come back (its first retry waits ~100 ms): the notification is
	// lost for certain.
	var killed int
	if err := f.DB.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'ffd-worker') k`).Scan(&killed); err != nil || killed != 1 {
		t.Fatalf("terminated %d listeners (%v), want the worker's one", killed, err)
	}
	if _, err := f.client.Revoke(f.Ctx, x.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-h.ended:
		if !errors.Is(cause, ffd.ErrLeaseLost) {
			t.Fatalf("handler context cancelled with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the handler of a lease revoked during the listener's gap still runs (its heartbeat is twenty minutes away)")
	}
}

// While its LISTEN connection is down (here it never comes up: its
// address has no server), a worker polls, and each poll asks the database
// which of its leases are gone: a cancel reaches the handler within a poll
// or two, not at the heartbeat twenty minutes away.
func TestCancelReachesTheHandlerWhileListenIsDown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := newBlockingHandler(1)
	nowhere, err := pgx.ParseConfig("postgres://nobody@127.0.0.1:1/none?connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"down"}, Handler: h.run, Concurrency: 1,
		ListenConnConfig: nowhere, PollInterval: 100 * time.Millisecond})
	x := f.mustCreate(ffd.CreateParams{Lane: "down", LeaseTTL: time.Hour})
	select {
	case <-h.started:
	case <-time.After(time.Minute):
		t.Fatal("the handler never started (the worker should poll while LISTEN is down)")
	}
	if _, err := f.client.Cancel(f.Ctx, x.ID, "user asked", ""); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-h.ended:
		if !errors.Is(cause, ffd.ErrLeaseLost) {
			t.Fatalf("handler context cancelled with %v, want ErrLeaseLost", cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler of a cancelled execution still runs while LISTEN is down (its heartbeat is twenty minutes away)")
	}
}

// Stop keeps its context's deadline against a database that accepts
// connections and never answers, and hands the unfinished executions back
// in one statement once the database answers again... or leaves them to
// lapse when it does not.
//
// Not parallel: it inspects every goroutine of the process for the
// worker's, and other tests run workers of their own.
func TestWorkerStopKeepsItsDeadlineAgainstAFrozenDatabase(t *testing.T) {
	f := setup(t)
	proxy := testdb.NewProxy(t, f.DB)
	pool, err := pgxpool.New(f.Ctx, proxy.URL(f.DB))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := newBlockingHandler(4)
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"frozen"}, Handler: h.run, Concurrency: 4, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		f.mustCreate(ffd.CreateParams{Lane: "frozen"})
	}
	for range 4 {
		select {
		case <-h.started:
		case <-time.After(time.Minute):
			t.Fatal("handlers did not start")
		}
	}
	proxy.Freeze()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	err = w.Stop(ctx)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want the deadline's error (handlers were cut short)", err)
	}
	// The bound is the deadline plus generous slack for a loaded machine
	// under -race; what it rules out is blocking on the frozen database
	// (30 s per execution for a one-by-one hand-back, or forever).
	if took > 10*time.Second {
		t.Fatalf("Stop with a 1 s deadline took %s against a frozen database", took)
	}
	for range 4 {
		if cause := <-h.ended; !errors.Is(cause, ffd.ErrWorkerStopped) {
			t.Fatalf("handler cancelled with %v, want ErrWorkerStopped", cause)
		}
	}
	// Every goroutine the worker started is gone by the time Stop returns
	// (the handlers honour their context, so none is abandoned).
	// A goroutine that has signalled its end may still be unwinding its
	// defers for a moment; give it that moment, not more.
	buf := make([]byte, 4<<20)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		stacks := string(buf[:runtime.Stack(buf, true)])
		if !strings.Contains(stacks, "ffd.(*Worker)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("worker goroutines still running after Stop:\n%s", stacks)
		}
	}
	proxy.Thaw()
}

// With the database answering, Stop hands every unfinished execution back
// in one statement: pending at once, fenced, attempt recorded.
func TestWorkerStopHandsBackInOneBatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := newBlockingHandler(5)
	w, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: []string{"handback"}, Handler: h.run, Concurrency: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	last := f.mustCreate(ffd.CreateParams{Lane: "handback", MaxAttempts: 1})
	for range 4 {
		f.mustCreate(ffd.CreateParams{Lane: "handback"})
	}
	for range 5 {
		<-h.started
	}
	// The hand-back gets the last quarter of Stop's deadline, at most
	// HandBackTimeout (2 s): a deadline of 8 s gives it 2 s, enough for
	// one statement on a machine with every core busy (a deadline of
	// 500 ms gave it 125 ms, which such a machine did not always give).
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	if err := w.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop: %v, want DeadlineExceeded", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'handback' AND state = 'pending' AND run_at <= now()`); n != 4 {
		t.Fatalf("%d executions pending again, want 4", n)
	}
	if x, _ := f.client.Get(f.Ctx, last.ID); x.State != ffd.StateFailed {
		t.Fatalf("the execution with no attempt left is %s, want failed", x.State)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all a JOIN ff_execution e USING (partition_key, execution_id)
		WHERE e.lane = 'handback' AND a.outcome = 'failed' AND a.error LIKE 'worker stopped%'`); n != 5 {
		t.Fatalf("%d attempts recorded as handed back, want 5", n)
	}
	if err := store.CheckInvariants(f.Ctx, f.DB.Pool); err != nil {
		t.Fatal(err)
	}
}

// freezeFlow stands in for a process frozen mid-cascade: a session with
// the guard (its idle-in-transaction timeout idle), idle in a transaction
// that holds the flow's row lock until the server ends it. It returns the
// transaction and the session's pid.
func (f *fixture) freezeFlow(flow uuid.UUID, idle time.Duration) (pgx.Tx, int) {
	f.T.Helper()
	guard := ffd.DefaultSessionConfig()
	guard.IdleInTransactionTimeout = idle
	frozen, err := ffd.NewPool(f.Ctx, f.DB.URL, &guard)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(frozen.Close)
	tx, err := frozen.Begin(f.Ctx)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var pid int
	if err := tx.QueryRow(f.Ctx, `SELECT pg_backend_pid() FROM ff_flow WHERE flow_id = $1 FOR NO KEY UPDATE`, flow).Scan(&pid); err != nil {
		f.T.Fatal(err)
	}
	return tx, pid
}

// A process frozen inside a transaction that holds a flow's row lock: the
// worker's other completions go through within the completion lock
// timeout (the batch is split), and the flow member's own completion goes
// through once the server ends the frozen session.
func TestFrozenLockHolderDoesNotStallOtherCompletions(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "a", Params: ffd.CreateParams{Lane: "frozen.flow"}},
		{Ref: "b", Params: ffd.CreateParams{Lane: "frozen.flow"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tx, pid := f.freezeFlow(sub.Flow.ID, 4*time.Second)

	var mu sync.Mutex
	done := map[string]time.Time{}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"frozen.flow", "frozen.solo"}, Concurrency: 20,
		CompletionLockTimeout: 200 * time.Millisecond,
		Handler:               func(ctx context.Context, j *ffd.Job) ([]byte, error) { return nil, nil }})
	var solos []ffd.ExecutionID
	for range 20 {
		solos = append(solos, f.mustCreate(ffd.CreateParams{Lane: "frozen.solo"}).ID)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
		mu.Lock()
		done[what] = time.Now()
		mu.Unlock()
	}
	waitFor("solos completed", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'frozen.solo' AND state = 'completed'`) == len(solos)
	})
	// The holder is still there: the solos did not wait for it.
	if alive := f.Count(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid); alive != 1 {
		t.Fatal("the frozen session ended before the solo completions; the test proves nothing")
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'frozen.flow' AND state = 'completed'`); n != 0 {
		t.Fatalf("%d flow members completed while their flow was locked", n)
	}
	// The server ends the frozen session; the members then complete.
	waitFor("flow members completed", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'frozen.flow' AND state = 'completed'`) == 2
	})
	if alive := f.Count(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid); alive != 0 {
		t.Fatal("the flow members completed while the frozen session still held the flow")
	}
	if err := tx.Commit(f.Ctx); err == nil {
		t.Fatal("the frozen session's transaction committed; the server should have ended it")
	}
	if d, _ := f.client.DescribeFlow(f.Ctx, sub.Flow.ID); d.State != ffd.FlowCompleted {
		t.Fatalf("flow is %s, want completed", d.State)
	}
}

// A completion that waits in the completer longer than its lease's TTL
// (here behind a flow row held by a frozen process) keeps its lease: the
// worker renews it until the result is recorded, so the daemon does not
// find it lapsed and run the step again, and the result is not refused.
func TestLeaseKeptWhileTheCompletionWaits(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "a", Params: ffd.CreateParams{Lane: "slowcommit", LeaseTTL: time.Second, MaxAttempts: 5}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	f.freezeFlow(sub.Flow.ID, 4*time.Second) // four TTLs
	var runs atomic.Int32
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"slowcommit"}, Concurrency: 2,
		CompletionLockTimeout: 100 * time.Millisecond,
		Handler:               func(context.Context, *ffd.Job) ([]byte, error) { runs.Add(1); return nil, nil }})
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		var state ffd.State
		var epoch int64
		if err := f.DB.Pool.QueryRow(f.Ctx, `SELECT state, lease_epoch FROM ff_execution WHERE flow_id = $1`, sub.Flow.ID).Scan(&state, &epoch); err != nil {
			t.Fatal(err)
		}
		if state == ffd.StateCompleted {
			if epoch != 1 || runs.Load() != 1 {
				t.Fatalf("completed at lease epoch %d after %d runs of the handler; want epoch 1 and one run (the lease kept while the completion waited)", epoch, runs.Load())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not completed within a minute: %s at epoch %d, %d runs", state, epoch, runs.Load())
		}
	}
}
