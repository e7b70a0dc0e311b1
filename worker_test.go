package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
	"go.uber.org/zap"
)

type fixture struct {
	*testdb.Fixture
	client *ffd.Client
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupFor(t, 3*time.Minute)
}

// setupFor is setup for a test that runs longer than setup allows.
func setupFor(t *testing.T, timeout time.Duration) *fixture {
	t.Helper()
	tf := testdb.Setup(t, timeout)
	// Quiet: a test that wants the logs passes a logger of its own.
	client, err := ffd.NewClient(tf.Pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Fixture: tf, client: client}
}

func (f *fixture) newWorker(cfg ffd.WorkerConfig) *ffd.Worker {
	f.T.Helper()
	w, err := ffd.NewWorker(f.client, cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	return w
}

func (f *fixture) startWorker(cfg ffd.WorkerConfig) *ffd.Worker {
	f.T.Helper()
	w := f.newWorker(cfg)
	if err := w.Start(f.Ctx); err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

func TestWorkerRunsThousand(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 1000
	for i := range n {
		if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bulk", JSON: map[string]int{"i": i}}); err != nil {
			t.Fatal(err)
		}
	}
	var running, peak atomic.Int64
	var mu sync.Mutex
	seen := map[int]int{}
	f.startWorker(ffd.WorkerConfig{
		Lanes:       []string{"bulk"},
		Concurrency: 32,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			now := running.Add(1)
			defer running.Add(-1)
			for {
				p := peak.Load()
				if now <= p || peak.CompareAndSwap(p, now) {
					break
				}
			}
			var in struct{ I int }
			if err := job.UnmarshalPayload(&in); err != nil {
				return nil, err
			}
			mu.Lock()
			seen[in.I]++
			mu.Unlock()
			time.Sleep(time.Millisecond)
			return []byte(fmt.Sprint(in.I)), nil
		},
	})
	f.WaitFor("1,000 completions", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == n
	})
	if peak.Load() > 32 {
		t.Fatalf("%d handlers ran at once, concurrency is 32", peak.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if seen[i] != 1 {
			t.Fatalf("payload %d handled %d times, want 1", i, seen[i])
		}
	}
	if got := f.Count(`SELECT count(*) FROM ff_completion_event WHERE outcome = 'success'`); got != n {
		t.Fatalf("%d success events, want %d", got, n)
	}
}

func TestWorkerSurvivesPanic(t *testing.T) {
	t.Parallel()
	f := setup(t)
	bad, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "p", Kind: "explode", MaxAttempts: 1})
	good, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "p", Kind: "fine"})
	perm, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "p", Kind: "permanent", MaxAttempts: 5})
	f.startWorker(ffd.WorkerConfig{
		Lanes: []string{"p"},
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			switch job.Kind {
			case "explode":
				panic("kaboom")
			case "permanent":
				return nil, ffd.Permanent(errors.New("bad request"))
			}
			return []byte("ok"), nil
		},
	})
	f.WaitFor("all three to finish", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE terminal_at IS NOT NULL`) == 3
	})
	x, _ := f.client.Get(f.Ctx, bad.Execution.ID)
	if x.State != ffd.StateFailed || x.LastError != "handler panicked: kaboom" {
		t.Fatalf("panicking execution: %s %q, want failed with the panic", x.State, x.LastError)
	}
	x, _ = f.client.Get(f.Ctx, good.Execution.ID)
	if x.State != ffd.StateCompleted {
		t.Fatalf("execution after the panic: %s, want completed", x.State)
	}
	x, _ = f.client.Get(f.Ctx, perm.Execution.ID)
	if x.State != ffd.StateFailed || x.Attempt != 1 {
		t.Fatalf("permanent error: %s after %d attempts, want failed after 1", x.State, x.Attempt)
	}
}

// A worker whose heartbeat is fenced cancels its handler with ErrLeaseLost,
// and the handler's late result is not recorded.
func TestWorkerFencedHeartbeatStopsHandler(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "hb", LeaseTTL: time.Second})
	started := make(chan struct{})
	cause := make(chan error, 1)
	w := f.startWorker(ffd.WorkerConfig{
		Lanes: []string{"hb"},
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return []byte("too late"), nil
		},
	})
	<-started
	if _, err := f.client.Revoke(f.Ctx, res.Execution.ID, "test"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, ffd.ErrLeaseLost) {
			t.Fatalf("handler context cause %v, want ErrLeaseLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("handler was not cancelled after its lease was revoked")
	}
	// Once the worker is done with it, the first lease has completed
	// nothing (the worker may have claimed it again meanwhile).
	stopCtx, cancel := context.WithTimeout(f.Ctx, 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND lease_epoch = 1 AND outcome = 'succeeded'`, res.Execution.ID.UUID); n != 0 {
		t.Fatal("the fenced attempt was recorded as succeeded")
	}
}

// Stop waits for handlers until its context ends, then hands the rest back
// as retryable at once.
func TestWorkerStopHandsBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	res, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "slow"})
	started := make(chan struct{})
	release := make(chan struct{})
	w, err := ffd.NewWorker(f.client, ffd.WorkerConfig{
		Lanes: []string{"slow"},
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			close(started)
			<-release // ignores ctx, like a stubborn handler
			return nil, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	<-started
	// Stop keeps a quarter of its time for the hand-back statement: 2 s
	// leaves it 500 ms, enough on a loaded machine (200 ms left 50 ms and
	// flaked when the suite ran in parallel).
	stopCtx, cancel := context.WithTimeout(f.Ctx, 2*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the context's deadline error", err)
	}
	x, _ := f.client.Get(f.Ctx, res.Execution.ID)
	if x.State != ffd.StatePending || x.Attempt != 1 || x.LastError == "" {
		t.Fatalf("after stop: %s attempt %d error %q; want pending for a prompt retry", x.State, x.Attempt, x.LastError)
	}
	// Claimable at once: no backoff.
	got, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "slow", Worker: "other/1"})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim after hand-back: %d, %v", len(got), err)
	}
	close(release)
}

func TestNewWorkerValidates(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }
	bad := []ffd.WorkerConfig{
		{Handler: h},
		{Lanes: []string{"bad lane"}, Handler: h},
		{Lanes: []string{"l"}},
		{Lanes: []string{"l"}, Handler: h, Concurrency: -1},
		{Lanes: []string{"l"}, Handler: h, PollInterval: -time.Second},
	}
	for i, cfg := range bad {
		if _, err := ffd.NewWorker(f.client, cfg); !errors.Is(err, ffd.ErrValidation) {
			t.Errorf("config %d: %v, want a validation error", i, err)
		}
	}
}

func TestClientTxVariants(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tx, err := f.DB.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.client.CreateTx(f.Ctx, tx, ffd.CreateParams{Lane: "tx"})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := f.client.ClaimTx(f.Ctx, tx, ffd.ClaimParams{Lane: "tx", Worker: "w/1"})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim in tx: %d %v", len(claimed), err)
	}
	if _, err := f.client.CompleteTx(f.Ctx, tx, res.Execution.ID, claimed[0].LeaseEpoch, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(f.Ctx); err != nil {
		t.Fatal(err)
	}
	x, err := f.client.Get(f.Ctx, res.Execution.ID)
	if err != nil || x.State != ffd.StateCompleted {
		t.Fatalf("after committed tx: %v %v", x, err)
	}

	// Bad input through the public API is typed and writes nothing.
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "l", Payload: []byte("x"), JSON: 1}); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("payload and JSON together: %v", err)
	}
	if _, err := ffd.ParseExecutionID("{fp:999}:nope"); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("bad id: %v", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution`); n != 1 {
		t.Fatalf("%d executions, want 1", n)
	}
}

// Run works until its context ends, then stops: it returns nil once the
// handlers have finished, and claims nothing afterwards.
func TestWorkerRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w := f.newWorker(ffd.WorkerConfig{Lanes: []string{"run"}, Concurrency: 4, PollInterval: 50 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }})
	ctx, cancel := context.WithCancel(f.Ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, 5*time.Second) }()
	inLane := func(state ffd.State) func() bool {
		return func() bool {
			return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'run' AND state = $1`, state) > 0
		}
	}
	if _, err := f.client.CreateMany(f.Ctx, inOneLane("run", 20)); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("every execution completed", func() bool { return inLane(ffd.StateCompleted)() && !inLane(ffd.StatePending)() })
	cancel()
	runErr := f.await("Run to return", done)
	if runErr != nil {
		t.Fatalf("Run: %v, want nil", runErr)
	}
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "run"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // several poll intervals
	if !inLane(ffd.StatePending)() {
		t.Fatal("an execution created after Run returned was claimed")
	}
}

// startNoop runs a no-op worker on lane through client (one with a
// configuration of the test's own) until the test ends.
func (f *fixture) startNoop(client *ffd.Client, lane string) {
	f.T.Helper()
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{lane}, PollInterval: 50 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }})
	if err != nil {
		f.T.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
}

// await waits, within the test's bound, for the error a goroutine sends
// on done.
func (f *fixture) await(what string, done <-chan error) error {
	f.T.Helper()
	var err error
	f.WaitFor(what, func() bool {
		select {
		case err = <-done:
			return true
		default:
			return false
		}
	})
	return err
}

// inOneLane is n executions to create in lane, with every other parameter
// defaulted.
func inOneLane(lane string, n int) []ffd.CreateParams {
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i].Lane = lane
	}
	return ps
}
