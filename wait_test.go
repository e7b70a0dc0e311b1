package ffd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// waitClient is a client whose waits poll only once an hour: a wait that
// returns within a test was woken by a notification.
func (f *fixture) waitClient(poll time.Duration, listen *pgx.ConnConfig) *ffd.Client {
	f.T.Helper()
	c, err := ffd.NewClient(f.Pool, &ffd.Config{Logger: zap.NewNop(), WaitPollInterval: poll, ListenConnConfig: listen})
	if err != nil {
		f.T.Fatal(err)
	}
	return c
}

// waitersConnected counts the wait listener's connections.
func (f *fixture) waitersConnected() int {
	return f.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`, ffd.WaitApplicationName)
}

func TestWaitExecutionIsWokenByTheCompletion(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.waitClient(time.Hour, nil)
	tests := []struct {
		name  string
		end   func(x *ffd.Execution) error
		state ffd.State
	}{
		{"completed", func(x *ffd.Execution) error {
			_, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, []byte("done"))
			return err
		}, ffd.StateCompleted},
		{"failed", func(x *ffd.Execution) error {
			_, err := f.client.Fail(f.Ctx, x.ID, x.LeaseEpoch, ffd.FailParams{Error: "boom"})
			return err
		}, ffd.StateFailed},
		{"cancelled", func(x *ffd.Execution) error {
			_, err := f.client.Cancel(f.Ctx, x.ID, "no longer wanted", "test")
			return err
		}, ffd.StateCancelled},
	}
	for _, tc := range tests {
		x := f.mustCreate(ffd.CreateParams{Lane: "wait-" + tc.name, MaxAttempts: 1})
		got := make(chan *ffd.Execution, 1)
		errs := make(chan error, 1)
		go func() {
			out, err := c.WaitExecution(f.Ctx, x.ID)
			errs <- err
			got <- out
		}()
		f.WaitFor("the wait's listener", func() bool { return f.waitersConnected() == 1 })
		select {
		case err := <-errs:
			t.Fatalf("%s: the wait returned before the execution ended: %v", tc.name, err)
		case <-time.After(100 * time.Millisecond):
		}
		if err := tc.end(f.claimOne(x)); err != nil {
			t.Fatal(err)
		}
		if err := <-errs; err != nil {
			t.Fatalf("%s: wait: %v", tc.name, err)
		}
		out := <-got
		if out.State != tc.state {
			t.Fatalf("%s: the wait returned state %s, want %s", tc.name, out.State, tc.state)
		}
		if tc.state == ffd.StateCompleted && string(out.Result) != "done" {
			t.Fatalf("the wait returned result %q, want %q", out.Result, "done")
		}
		f.WaitFor("the wait's listener to close after the last wait", func() bool { return f.waitersConnected() == 0 })
	}
}

func TestWaitFlowReturnsEveryStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	c := f.waitClient(time.Hour, nil)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "fetch", Params: ffd.CreateParams{Lane: "wf", Kind: "fetch"}},
			{Ref: "sum", Params: ffd.CreateParams{Lane: "wf", Kind: "sum"}},
		},
		Edges: []ffd.SubmitEdge{{From: "fetch", To: "sum"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		out *ffd.FlowOutcome
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := c.WaitFlow(f.Ctx, sub.Flow.ID)
		done <- result{out, err}
	}()
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"wf"}, Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		return []byte(job.Kind + " ok"), nil
	}})
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.out.Flow.State != ffd.FlowCompleted || len(r.out.Members) != 2 {
		t.Fatalf("WaitFlow returned a %s flow with %d members; want completed with 2", r.out.Flow.State, len(r.out.Members))
	}
	for _, step := range []string{"fetch", "sum"} {
		if x := r.out.Steps[step]; x == nil || x.State != ffd.StateCompleted || string(x.Result) != step+" ok" {
			t.Fatalf("step %s: %+v; want completed with result %q", step, x, step+" ok")
		}
	}
}

// Many waits share one LISTEN connection, and close it after the last.
func TestWaitsShareOneListener(t *testing.T) {
	t.Parallel()
	f := setup(t)
	c := f.waitClient(time.Hour, nil)
	const n = 40
	xs := make([]*ffd.Execution, n)
	for i := range xs {
		xs[i] = f.mustCreate(ffd.CreateParams{Lane: "many"})
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, x := range xs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := c.WaitExecution(f.Ctx, x.ID)
			if err == nil && out.State != ffd.StateCompleted {
				err = errors.New("state " + string(out.State))
			}
			errs <- err
		}()
	}
	f.WaitFor("the wait's listener", func() bool { return f.waitersConnected() == 1 })
	claimed, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "many", Worker: "w", Max: n})
	if err != nil || len(claimed) != n {
		t.Fatalf("claim: %d, %v; want %d", len(claimed), err, n)
	}
	if got := f.waitersConnected(); got != 1 {
		t.Fatalf("%d wait listeners for %d waits; want 1", got, n)
	}
	for _, x := range claimed {
		if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	f.WaitFor("the wait's listener to close", func() bool { return f.waitersConnected() == 0 })
}

// Without notifications (a LISTEN that cannot connect, as behind a
// transaction pooler) a wait still ends, at its poll.
func TestWaitPollsWithoutNotifications(t *testing.T) {
	t.Parallel()
	f := setup(t)
	bad := f.Pool.Config().ConnConfig.Copy()
	bad.Port = 1 // nothing listens there
	bad.ConnectTimeout = time.Second
	c := f.waitClient(50*time.Millisecond, bad)
	x := f.mustCreate(ffd.CreateParams{Lane: "poll"})
	done := make(chan error, 1)
	go func() {
		out, err := c.WaitExecution(f.Ctx, x.ID)
		if err == nil && out.State != ffd.StateCompleted {
			err = errors.New("state " + string(out.State))
		}
		done <- err
	}()
	c2 := f.claimOne(x)
	if _, err := f.client.Complete(f.Ctx, c2.ID, c2.LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the wait did not end at its poll without notifications")
	}
}

func TestWaitIsBoundedAndRefusesMissingObjects(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.mustCreate(ffd.CreateParams{Lane: "never"})
	ctx, cancel := context.WithTimeout(f.Ctx, 200*time.Millisecond)
	defer cancel()
	if _, err := f.client.WaitExecution(ctx, x.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past its context: %v; want context.DeadlineExceeded", err)
	}
	var nf *ffd.NotFoundError
	missing := ffd.ExecutionID{Partition: x.ID.Partition, UUID: x.ID.UUID}
	missing.UUID[15] ^= 1
	if _, err := f.client.WaitExecution(f.Ctx, missing); !errors.As(err, &nf) {
		t.Fatalf("wait for a missing execution: %v; want a NotFoundError", err)
	}
	if _, err := f.client.WaitFlow(f.Ctx, x.ID.UUID); !errors.As(err, &nf) {
		t.Fatalf("wait for a missing flow: %v; want a NotFoundError", err)
	}
	if _, err := ffd.NewClient(f.Pool, &ffd.Config{WaitPollInterval: time.Millisecond}); err == nil {
		t.Fatal("a client with a 1ms wait poll was accepted; want a ValidationError")
	}
}
