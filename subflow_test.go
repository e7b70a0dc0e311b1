package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// echoKinds completes "ok" steps with their payload and fails "bad"
// steps for good.
func echoKinds() *ffd.Kinds {
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "ok", func(ctx context.Context, job *ffd.Job) ([]byte, error) { return job.Payload, nil })
	ffd.HandleBytes(kinds, "bad", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		return nil, ffd.Permanent(errors.New("bad step"))
	})
	return kinds
}

// childOf is a two-step child flow: a → b, b's result the child's.
func childOf(kindB string) *ffd.SubmitFlowParams {
	return &ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "a", Params: ffd.CreateParams{Lane: "sub", Kind: "ok", Payload: []byte(`"a"`)}},
			{Ref: "b", Params: ffd.CreateParams{Lane: "sub", Kind: kindB, Payload: []byte(`{"n":2}`)}},
		},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	}
}

// A sub-flow step runs its child after its upstream, completes with the
// child's results, and its downstream runs after it; the child links
// back to its step.
func TestSubflowRunsAsOneStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sub"}, Kinds: echoKinds(), Concurrency: 4, PollInterval: 50 * time.Millisecond})
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "before", Params: ffd.CreateParams{Lane: "sub", Kind: "ok"}},
			{Ref: "child", Flow: childOf("ok")},
			{Ref: "after", Params: ffd.CreateParams{Lane: "sub", Kind: "ok"}},
		},
		Edges: []ffd.SubmitEdge{{From: "before", To: "child"}, {From: "child", To: "after"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if lane := sub.Executions["child"].Lane; lane != ffd.SubflowLane {
		t.Fatalf("the sub-flow step's lane is %q; want %q", lane, ffd.SubflowLane)
	}
	out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted {
		t.Fatalf("parent %s; want completed", out.Flow.State)
	}
	step := out.Steps["child"]
	var res ffd.SubflowResult
	if err := json.Unmarshal(step.Result, &res); err != nil {
		t.Fatalf("the step's result %s: %v", step.Result, err)
	}
	if res.State != ffd.FlowCompleted || string(res.Results["b"]) != `{"n":2}` || len(res.Results) != 1 {
		t.Fatalf("the step's result %s; want the child completed with b's result alone", step.Result)
	}
	child, err := f.client.ChildFlow(f.Ctx, step.ID)
	if err != nil {
		t.Fatal(err)
	}
	if child == nil || child.ID != res.Flow || child.Parent == nil || *child.Parent != step.ID || child.Partition != sub.Flow.Partition {
		t.Fatalf("child %+v; want flow %s on partition %d linked to step %s", child, res.Flow, sub.Flow.Partition, step.ID)
	}
	if after := out.Steps["after"]; after.StartedAt == nil || after.StartedAt.Before(*step.TerminalAt) {
		t.Fatalf("after started %v, the sub-flow step ended %v; want after it", after.StartedAt, step.TerminalAt)
	}
	f.checkInvariants()
}

// A failed child fails its step, which fails the parent; a cancelled
// child cancels its step.
func TestSubflowFailureAndCancelGoUp(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sub"}, Kinds: echoKinds(), Concurrency: 4, PollInterval: 50 * time.Millisecond})
	failing, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "child", Flow: childOf("bad")}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.client.WaitFlow(f.Ctx, failing.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowFailed || out.Steps["child"].State != ffd.StateFailed {
		t.Fatalf("parent %s, step %s; want both failed", out.Flow.State, out.Steps["child"].State)
	}

	// A child that waits for a signal, cancelled from outside.
	waiting := &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "w", Params: ffd.CreateParams{Lane: "nobody", Kind: "ok"}}}}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "child", Flow: waiting}}})
	if err != nil {
		t.Fatal(err)
	}
	child := f.waitChild(sub.Executions["child"].ID)
	if _, err := f.client.CancelFlow(f.Ctx, child.ID, ffd.CancelAll, "test"); err != nil {
		t.Fatal(err)
	}
	out, err = f.client.WaitFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if st := out.Steps["child"].State; st != ffd.StateCancelled {
		t.Fatalf("the step of a cancelled child is %s; want cancelled", st)
	}
	f.checkInvariants()
}

// Cancelling the parent (cancel_all) while its child runs cancels the
// child: nothing of it runs on.
func TestSubflowCancelGoesDown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	waiting := &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "w", Params: ffd.CreateParams{Lane: "nobody", Kind: "ok"}}}}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "child", Flow: waiting}}})
	if err != nil {
		t.Fatal(err)
	}
	child := f.waitChild(sub.Executions["child"].ID)
	if _, err := f.client.CancelFlow(f.Ctx, sub.Flow.ID, ffd.CancelAll, "test"); err != nil {
		t.Fatal(err)
	}
	out, err := f.client.WaitFlow(f.Ctx, child.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCancelled || out.Steps["w"].State != ffd.StateCancelled {
		t.Fatalf("child %s, its step %s; want both cancelled", out.Flow.State, out.Steps["w"].State)
	}
	f.checkInvariants()
}

// waitChild waits until the daemon started the sub-flow step's child.
func (f *fixture) waitChild(step ffd.ExecutionID) *ffd.Flow {
	f.T.Helper()
	for {
		child, err := f.client.ChildFlow(f.Ctx, step)
		if err != nil {
			f.T.Fatal(err)
		}
		if child != nil {
			return child
		}
		select {
		case <-f.Ctx.Done():
			f.T.Fatalf("the daemon did not start the child of %s within the test's budget", step)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
