package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
)

// wake reads x's wake, failing the test on an error.
func (f *fixture) wake(id ffd.ExecutionID) *ffd.Wake {
	f.T.Helper()
	w, err := f.client.Wake(f.Ctx, id)
	if err != nil {
		f.T.Fatalf("wake of %s: %v", id, err)
	}
	return w
}

// waiting reports whether x is in a wait now.
func (f *fixture) waiting(id ffd.ExecutionID) bool {
	w := f.wake(id)
	return w != nil && w.Waiting
}

// A sleeping step holds no slot and no lease, and comes back when its
// time comes; its wait does not count against max_attempts.
func TestSleepResumesAndDoesNotSpendAttempts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var runs atomic.Int64
	var mu sync.Mutex
	var wakes []*ffd.Wake
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sleepy"}, PollInterval: 20 * time.Millisecond, Concurrency: 1,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			runs.Add(1)
			w, err := job.Wake(ctx)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			wakes = append(wakes, w)
			mu.Unlock()
			if w == nil || w.Waits < 3 {
				return nil, ffd.Sleep(150 * time.Millisecond)
			}
			return []byte(fmt.Sprintf("woke by %s after %d waits", w.Reason, w.Waits)), nil
		}})
	// One attempt allowed: three sleeps must not spend it.
	x := f.mustCreate(ffd.CreateParams{Lane: "sleepy", MaxAttempts: 1})
	done, err := f.client.WaitExecution(f.Ctx, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != ffd.StateCompleted || string(done.Result) != "woke by timer after 3 waits" || done.Attempt != 4 {
		t.Fatalf("after three sleeps: state %s, result %q, attempt %d; want completed, %q, attempt 4",
			done.State, done.Result, done.Attempt, "woke by timer after 3 waits")
	}
	if runs.Load() != 4 {
		t.Fatalf("the handler ran %d times; want 4 (once, and once after each sleep)", runs.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for i, w := range wakes[1:] {
		if w.For != "sleep" || w.Reason != ffd.WokenByTimer || w.Waiting || w.Until == nil {
			t.Fatalf("wake %d: %+v; want a sleep ended by its timer", i+1, w)
		}
	}
	// Each sleep lasted its time: the attempt after it began no sooner.
	as, err := f.client.Attempts(f.Ctx, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	waited := 0
	for i, a := range as {
		if a.Outcome != ffd.AttemptWaited {
			continue
		}
		waited++
		if next := as[i+1].StartedAt; next.Sub(*a.EndedAt) < 140*time.Millisecond {
			t.Fatalf("attempt %d began %s after the sleep of attempt %d began; want at least its 150ms", i+2, next.Sub(*a.EndedAt), i+1)
		}
	}
	if waited != 3 {
		t.Fatalf("%d attempts ended in a wait; want 3: %+v", waited, as)
	}
	if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE event_type = 'suspended'`); n != 3 {
		t.Fatalf("%d 'suspended' lease events; want 3", n)
	}
	f.checkInvariants()
}

// A signal wakes the step that waits for it, with its payload; a signal
// sent before the wait begins is not lost.
func TestSignalWakesTheWait(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"approve"}, PollInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			w, err := job.Wake(ctx)
			if err != nil {
				return nil, err
			}
			if w == nil {
				if job.Kind == "early" {
					// The signal is sent while the step runs, before it waits.
					<-time.After(200 * time.Millisecond)
				}
				return nil, ffd.WaitForSignal("approved", 0)
			}
			if w.Reason != ffd.WokenBySignal {
				return nil, ffd.Permanent(fmt.Errorf("woken by %s", w.Reason))
			}
			return w.Received.Payload, nil
		}})
	for _, kind := range []string{"late", "early"} {
		sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
			{Ref: "review", Params: ffd.CreateParams{Lane: "approve", Kind: kind}}}})
		if err != nil {
			t.Fatal(err)
		}
		x := sub.Executions["review"]
		if kind == "late" {
			f.WaitFor("the step to wait", func() bool { return f.waiting(x.ID) })
		} else {
			f.WaitFor("the step to run", func() bool {
				got, err := f.client.Get(f.Ctx, x.ID)
				return err == nil && got.State == ffd.StateRunning
			})
		}
		res, err := f.client.Signal(f.Ctx, ffd.SignalParams{FlowID: &sub.Flow.ID, Name: "approved", Payload: []byte("yes from " + kind)})
		if err != nil {
			t.Fatal(err)
		}
		if kind == "late" && (res.Woke == nil || *res.Woke != x.ID) {
			t.Fatalf("the signal woke %v; want the waiting step %s", res.Woke, x.ID)
		}
		if kind == "early" && res.Woke != nil {
			t.Fatalf("the signal woke %v while the step still ran; want it kept for the wait", res.Woke)
		}
		out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got := out.Steps["review"]; got.State != ffd.StateCompleted || string(got.Result) != "yes from "+kind {
			t.Fatalf("%s signal: step %s with result %q; want completed with %q", kind, got.State, got.Result, "yes from "+kind)
		}
		sigs, err := f.client.FlowSignals(f.Ctx, sub.Flow.ID, 10)
		if err != nil || len(sigs) != 1 || sigs[0].ConsumedBy == nil || *sigs[0].ConsumedBy != x.ID {
			t.Fatalf("signals of the flow: %+v, %v; want one, taken by %s", sigs, err, x.ID)
		}
	}
	f.checkInvariants()
}

// A signal sent while the wait is being recorded: whichever commits
// second sees the other, so no wait is left waiting with its signal
// kept. No daemon runs: its sweep would hide a lost race.
func TestSignalRacingTheWait(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 60
	xs := make([]*ffd.Execution, n)
	for i := range xs {
		xs[i] = f.mustCreate(ffd.CreateParams{Lane: "race"})
	}
	claimed, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "race", Worker: "w/race", Max: n})
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for _, x := range claimed {
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			_, err := f.client.Suspend(f.Ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "go"})
			errs <- err
		}()
		go func() {
			defer wg.Done()
			<-start
			_, err := f.client.Signal(f.Ctx, ffd.SignalParams{Execution: &x.ID, Name: "go", JSON: map[string]string{"to": x.ID.String()}})
			errs <- err
		}()
		close(start)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range claimed {
		w := f.wake(x.ID)
		if w == nil || w.Reason != ffd.WokenBySignal || w.Received == nil || string(w.Received.Payload) != `{"to":"`+x.ID.String()+`"}` {
			t.Fatalf("%s after its wait raced its signal: %+v; want woken by its signal", x.ID, w)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_signal WHERE consumed_by IS NULL`); n != 0 {
		t.Fatalf("%d signals kept unconsumed after the race; want 0", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'race' AND state = 'pending' AND run_at <= now()`); n != 60 {
		t.Fatalf("%d of 60 executions claimable; want all", n)
	}
	f.checkInvariants()
}

// A signal wait's timeout ends it without the signal; a signal sent
// later is kept for a wait to come.
func TestSignalWaitTimesOut(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.claimOne(f.mustCreate(ffd.CreateParams{Lane: "timeout"}))
	s, err := f.client.Suspend(f.Ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "never", Timeout: 100 * time.Millisecond})
	if err != nil || s.Woken || s.RunAt.IsZero() {
		t.Fatalf("suspend: %+v, %v; want a wait with its timeout", s, err)
	}
	if _, err := f.client.Suspend(f.Ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "never"}); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Fatalf("suspend again at the same epoch: %v; want ErrLeaseLost", err)
	}
	f.WaitFor("the timeout", func() bool {
		xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "timeout", Worker: "w/1"})
		if err != nil {
			t.Fatal(err)
		}
		return len(xs) == 1
	})
	if w := f.wake(x.ID); w.Reason != ffd.WokenByTimeout || w.Waiting || w.Received != nil {
		t.Fatalf("after the timeout: %+v; want ended by its timeout", w)
	}
	res, err := f.client.Signal(f.Ctx, ffd.SignalParams{Execution: &x.ID, Name: "never"})
	if err != nil || res.Woke != nil {
		t.Fatalf("a signal after the timeout: %+v, %v; want it kept", res, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_signal WHERE consumed_by IS NULL`); n != 1 {
		t.Fatalf("%d signals kept; want 1", n)
	}
	f.checkInvariants()
}

// Signals to what cannot take them are refused with typed errors.
func TestSignalRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "refuse"}}}})
	if err != nil {
		t.Fatal(err)
	}
	x := f.claimOne(sub.Executions["a"])
	if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	var te *ffd.AlreadyTerminalError
	if _, err := f.client.Signal(f.Ctx, ffd.SignalParams{FlowID: &sub.Flow.ID, Name: "late"}); !errors.As(err, &te) || te.Object != "flow" {
		t.Fatalf("signal a finished flow: %v; want an AlreadyTerminalError on the flow", err)
	}
	if _, err := f.client.Signal(f.Ctx, ffd.SignalParams{Execution: &x.ID, Name: "late"}); !errors.As(err, &te) || te.Object != "execution" {
		t.Fatalf("signal a finished execution: %v; want an AlreadyTerminalError on the execution", err)
	}
	var nf *ffd.NotFoundError
	other := sub.Flow.ID
	other[15] ^= 1
	if _, err := f.client.Signal(f.Ctx, ffd.SignalParams{FlowID: &other, Name: "x"}); !errors.As(err, &nf) {
		t.Fatalf("signal a missing flow: %v; want a NotFoundError", err)
	}
	var ve *ffd.ValidationError
	for name, p := range map[string]ffd.SignalParams{
		"no target":   {Name: "x"},
		"two targets": {Name: "x", FlowID: &sub.Flow.ID, Execution: &x.ID},
		"bad name":    {Name: "has space", FlowID: &sub.Flow.ID},
		"too large":   {Name: "x", FlowID: &sub.Flow.ID, Payload: make([]byte, 2<<20)},
	} {
		if _, err := f.client.Signal(f.Ctx, p); !errors.As(err, &ve) {
			t.Fatalf("%s: %v; want a ValidationError", name, err)
		}
	}
	y := f.claimOne(f.mustCreate(ffd.CreateParams{Lane: "refuse.wait"}))
	for name, p := range map[string]ffd.SuspendParams{
		"nothing":       {},
		"sleep and sig": {For: time.Second, Signal: "x"},
		"negative":      {For: -time.Second},
		"too long":      {For: 400 * 24 * time.Hour},
		"timeout only":  {Timeout: time.Second},
		"bad signal":    {Signal: "a b"},
	} {
		if _, err := f.client.Suspend(f.Ctx, y.ID, y.LeaseEpoch, p); !errors.As(err, &ve) {
			t.Fatalf("suspend with %s: %v; want a ValidationError", name, err)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_signal`); n != 0 {
		t.Fatalf("refused signals wrote %d rows", n)
	}
	f.checkInvariants()
}

// A waiting step is cancelled like any pending one, and a sleep's timer
// is in its row, not in a daemon: a daemon started after the sleep
// began wakes the worker when it ends.
func TestSleepAcrossDaemonRestart(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.startDaemon()
	var runs atomic.Int64
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"timer"}, PollInterval: time.Hour,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			runs.Add(1)
			if w, err := job.Wake(ctx); err != nil || w == nil {
				return nil, ffd.Sleep(time.Second)
			}
			return []byte("done"), nil
		}})
	x := f.mustCreate(ffd.CreateParams{Lane: "timer"})
	f.WaitFor("the sleep", func() bool { return f.waiting(x.ID) })
	if err := first.Stop(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.startDaemon()
	got, err := f.client.WaitExecution(f.Ctx, x.ID)
	if err != nil || got.State != ffd.StateCompleted {
		t.Fatalf("after the sleep: %+v, %v; want completed", got, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("the handler ran %d times; want 2: the sleep's timer fires once", runs.Load())
	}
	y := f.mustCreate(ffd.CreateParams{Lane: "timer"})
	f.WaitFor("the second sleep", func() bool { return f.waiting(y.ID) })
	if _, err := f.client.Cancel(f.Ctx, y.ID, "not needed", "test"); err != nil {
		t.Fatal(err)
	}
	var te *ffd.AlreadyTerminalError
	if _, err := f.client.Signal(f.Ctx, ffd.SignalParams{Execution: &y.ID, Name: "x"}); !errors.As(err, &te) {
		t.Fatalf("signal a cancelled wait: %v; want an AlreadyTerminalError", err)
	}
	f.checkInvariants()
}

// A wait left waiting beside a signal sent for it (by a binary from
// before signals took the wait's lock, say) is ended by the daemon's
// sweep.
func TestSweepEndsAWaitThatMissedItsSignal(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.claimOne(f.mustCreate(ffd.CreateParams{Lane: "missed"}))
	if _, err := f.client.Suspend(f.Ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "ping"}); err != nil {
		t.Fatal(err)
	}
	f.Exec(`INSERT INTO ff_signal (partition_key, signal_id, execution_id, name, payload) VALUES ($1, gen_random_uuid(), $2, 'ping', 'p')`,
		x.ID.Partition, x.ID.UUID)
	if !f.waiting(x.ID) {
		t.Fatal("the wait ended before the sweep")
	}
	f.startDaemon()
	f.WaitFor("the sweep to end the wait", func() bool { w := f.wake(x.ID); return w.Reason == ffd.WokenBySignal })
	if w := f.wake(x.ID); string(w.Received.Payload) != "p" {
		t.Fatalf("woken with %q; want the signal's payload %q", w.Received.Payload, "p")
	}
	f.checkInvariants()
}

// checkInvariants proves the store's invariants over what the test wrote.
func (f *fixture) checkInvariants() {
	f.T.Helper()
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		f.T.Fatal(err)
	}
}

// SignalTx sends with the caller's transaction: nothing when it rolls
// back, the wait ended when it commits.
func TestSignalTx(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.claimOne(f.mustCreate(ffd.CreateParams{Lane: "signaltx"}))
	if _, err := f.client.Suspend(f.Ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "paid"}); err != nil {
		t.Fatal(err)
	}
	for _, commit := range []bool{false, true} {
		tx, err := f.Pool.Begin(f.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.client.SignalTx(f.Ctx, tx, ffd.SignalParams{Execution: &x.ID, Name: "paid", Payload: []byte("invoice-7")})
		if err != nil || res.Woke == nil {
			t.Fatalf("signal in a transaction: %+v, %v; want it to end the wait", res, err)
		}
		if commit {
			err = tx.Commit(f.Ctx)
		} else {
			err = tx.Rollback(f.Ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		w := f.wake(x.ID)
		if commit != (w.Reason == ffd.WokenBySignal) || w.Waiting == commit {
			t.Fatalf("after the transaction (committed %v): %+v", commit, w)
		}
		if n := f.Count(`SELECT count(*) FROM ff_signal`); n != map[bool]int{false: 0, true: 1}[commit] {
			t.Fatalf("after the transaction (committed %v): %d signals", commit, n)
		}
	}
	f.checkInvariants()
}

// Attempts that ended in waits do not count against max_attempts when a
// failure asks for a retry: with two attempts allowed and two waits, the
// first failure is retried and the second is final.
func TestWaitsExtendTheRetryBudget(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.mustCreate(ffd.CreateParams{Lane: "budget", MaxAttempts: 2, Retry: ffd.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}})
	claim := func() *ffd.Execution {
		t.Helper()
		var got *ffd.Execution
		f.WaitFor("the execution to be claimable", func() bool {
			xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "budget", Worker: "w/1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(xs) == 1 {
				got = xs[0]
			}
			return got != nil
		})
		return got
	}
	for range 2 {
		c := claim()
		if _, err := f.client.Suspend(f.Ctx, c.ID, c.LeaseEpoch, ffd.SuspendParams{For: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []ffd.State{ffd.StatePending, ffd.StateFailed} {
		c := claim()
		out, err := f.client.Fail(f.Ctx, c.ID, c.LeaseEpoch, ffd.FailParams{Error: "flaky", Retryable: true})
		if err != nil || out.State != want {
			t.Fatalf("failure %d (attempt %d, 2 waits, 2 attempts allowed): %+v, %v; want %s", i+1, c.Attempt, out, err, want)
		}
	}
	if got, _ := f.client.Get(f.Ctx, x.ID); got.Attempt != 4 {
		t.Fatalf("attempt %d at the end; want 4 (two waits, two tries)", got.Attempt)
	}
	f.checkInvariants()
}

// A handler that asks for a wait that cannot be fails for good, saying
// why, rather than retrying a bug.
func TestImpossibleWaitFails(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"badwait"}, PollInterval: 20 * time.Millisecond,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) { return nil, ffd.Sleep(0) }})
	x := f.mustCreate(ffd.CreateParams{Lane: "badwait", MaxAttempts: 5})
	got, err := f.client.WaitExecution(f.Ctx, x.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != ffd.StateFailed || got.Attempt != 1 || !strings.Contains(got.LastError, "sleep 0s") {
		t.Fatalf("after an impossible wait: %s at attempt %d, error %q; want failed at once, naming the wait", got.State, got.Attempt, got.LastError)
	}
	f.checkInvariants()
}
