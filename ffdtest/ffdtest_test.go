package ffdtest_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtest"
)

// recorder is a testing.TB whose Fatalf is recorded instead of failing
// the real test: the assertions' own failures are what these tests check.
type recorder struct {
	testing.TB
	failure string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failure = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// failure runs fn against a recorder and returns its Fatalf message.
func failure(t *testing.T, fn func(tb testing.TB)) string {
	r := &recorder{TB: t}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		fn(r)
	}()
	wg.Wait()
	return r.failure
}

// Each test has a database of its own; Enqueued matches payload fields by
// JSON value; inside a transaction EnqueuedTx sees what is not committed
// yet, and a rollback leaves nothing; RequireEnqueued fails with what it
// found.
func TestEnqueuedAssertions(t *testing.T) {
	t.Parallel()
	db, other := ffdtest.New(t), ffdtest.New(t)
	ctx := context.Background()
	for _, n := range []int{1, 2, 2} {
		if _, err := db.Client.Create(ctx, ffd.CreateParams{Lane: "bill", Kind: "invoice", JSON: map[string]any{"n": n, "tags": []string{"a"}}}); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(db.Enqueued(t, ffdtest.Want{Kind: "invoice", Payload: map[string]any{"n": 2}})); got != 2 {
		t.Fatalf("payload n=2 matched %d, want 2", got)
	}
	if got := len(db.Enqueued(t, ffdtest.Want{Payload: map[string]any{"tags": []string{"a"}}})); got != 3 {
		t.Fatalf("payload tags=[a] matched %d, want 3", got)
	}
	if got := len(other.Enqueued(t, ffdtest.Want{})); got != 0 {
		t.Fatalf("another test's database holds %d executions, want 0", got)
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Client.CreateTx(ctx, tx, ffd.CreateParams{Lane: "bill", Kind: "refund"}); err != nil {
		t.Fatal(err)
	}
	db.RequireEnqueuedTx(t, tx, ffdtest.Want{Kind: "refund"}, 1)
	if got := db.EnqueuedTx(t, tx, ffdtest.Want{Lane: "bill"}); len(got) != 4 {
		t.Fatalf("the transaction sees %d executions in the lane, want 4 (three committed, one its own)", len(got))
	}
	db.RequireEnqueued(t, ffdtest.Want{Kind: "refund"}, 0)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	db.RequireEnqueued(t, ffdtest.Want{Kind: "refund"}, 0)

	msg := failure(t, func(tb testing.TB) { db.RequireEnqueued(tb, ffdtest.Want{Kind: "invoice"}, 1) })
	if !strings.Contains(msg, "3 executions match") || !strings.Contains(msg, "invoice") {
		t.Fatalf("a failed assertion said %q; want the count and what matched", msg)
	}
}

// RunFlow returns a failed flow's step states too.
func TestRunFlowReportsFailures(t *testing.T) {
	t.Parallel()
	db := ffdtest.New(t)
	ctx := context.Background()
	sub, err := db.Client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "a", Params: ffd.CreateParams{Lane: "f", MaxAttempts: 1}},
			{Ref: "b", Params: ffd.CreateParams{Lane: "f"}},
		},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	run := db.RunFlow(t, sub.Flow.ID, ffd.WorkerConfig{Handler: func(context.Context, *ffd.Job) ([]byte, error) {
		return nil, fmt.Errorf("boom")
	}})
	if run.Flow.State != ffd.FlowFailed || run.State("a") != ffd.StateFailed || run.State("b") != ffd.StateSkipped {
		t.Fatalf("flow %s, a %s, b %s; want failed, failed, skipped", run.Flow.State, run.State("a"), run.State("b"))
	}
}
