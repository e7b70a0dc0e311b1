package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

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
	step, err := f.client.Get(f.Ctx, sub.Executions["child"].ID)
	if err != nil {
		t.Fatalf("read the running sub-flow step: %v", err)
	}
	if step.State != ffd.StateRunning || step.LeaseOwner != "ffd:subflow" || step.LeaseExpiresAt == nil || step.LeaseExpiresAt.Year() != 9999 {
		t.Fatalf("a started sub-flow step is %s held by %q until %v; want running, held by the engine until 9999", step.State, step.LeaseOwner, step.LeaseExpiresAt)
	}
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

// Bad sub-flows and compensations are typed errors and write nothing.
func TestWorkflowLinksRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cyclic := &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "again"}}}
	cyclic.Nodes[0].Flow = cyclic
	deep := childOf("ok")
	for range ffd.MaxSubflowDepth + 1 {
		deep = &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "down", Flow: deep}}}
	}
	ok := ffd.CreateParams{Lane: "sub", Kind: "ok"}
	one := func(n ffd.SubmitNode) ffd.SubmitFlowParams { return ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{n}} }
	for _, tt := range []struct {
		name string
		p    ffd.SubmitFlowParams
		kind ffd.ValidationKind
	}{
		{"a sub-flow that contains itself", *cyclic, ffd.KindCycle},
		{"sub-flows nested too deep", *deep, ffd.KindOutOfRange},
		{"a sub-flow step with a lane", one(ffd.SubmitNode{Ref: "c", Params: ok, Flow: childOf("ok")}), ffd.KindInvalidValue},
		{"a sub-flow step with a payload", one(ffd.SubmitNode{Ref: "c", Params: ffd.CreateParams{Payload: []byte("x")}, Flow: childOf("ok")}), ffd.KindInvalidValue},
		{"a sub-flow step with retries", one(ffd.SubmitNode{Ref: "c", Params: ffd.CreateParams{MaxAttempts: 3}, Flow: childOf("ok")}), ffd.KindInvalidValue},
		{"a child with a bad step", one(ffd.SubmitNode{Ref: "c", Flow: &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "x"}}}}), ffd.KindRequired},
		{"a child with a cycle", one(ffd.SubmitNode{Ref: "c", Flow: &ffd.SubmitFlowParams{
			Nodes: []ffd.SubmitNode{{Ref: "x", Params: ok}, {Ref: "y", Params: ok}},
			Edges: []ffd.SubmitEdge{{From: "x", To: "y"}, {From: "y", To: "x"}}}}), ffd.KindCycle},
		{"a child that names its id", one(ffd.SubmitNode{Ref: "c", Flow: &ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: uuid.New()},
			Nodes: []ffd.SubmitNode{{Ref: "x", Params: ok}}}}), ffd.KindInvalidValue},
		{"a compensation without a lane", one(ffd.SubmitNode{Ref: "c", Params: ok, Compensate: &ffd.CreateParams{Kind: "undo"}}), ffd.KindRequired},
		{"a compensation that names a step", one(ffd.SubmitNode{Ref: "c", Params: ok, Compensate: &ffd.CreateParams{Lane: "sub", Step: "other"}}), ffd.KindInvalidValue},
		{"an on-failure step with a payload", ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{OnFailure: &ffd.CreateParams{Lane: "sub", Payload: []byte("x")}},
			Nodes: []ffd.SubmitNode{{Ref: "c", Params: ok}}}, ffd.KindInvalidValue},
		{"a step named as the on-failure step", ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{OnFailure: &ffd.CreateParams{Lane: "sub"}},
			Nodes: []ffd.SubmitNode{{Ref: ffd.OnFailureStep, Params: ok}}}, ffd.KindInvalidValue},
		{"a step in the sub-flow lane", one(ffd.SubmitNode{Ref: "c", Params: ffd.CreateParams{Lane: ffd.SubflowLane}}), ffd.KindInvalidValue},
	} {
		_, err := f.client.SubmitFlow(f.Ctx, tt.p)
		var ve *ffd.ValidationError
		if !errors.As(err, &ve) || ve.Kind != tt.kind {
			t.Errorf("%s: %v; want a validation error of kind %s", tt.name, err, tt.kind)
		}
	}
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: ffd.SubflowLane}); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("a solo execution in the sub-flow lane: %v; want a validation error", err)
	}
	var flowsWritten, execs, comps, subs int
	if err := f.Pool.QueryRow(f.Ctx, `SELECT (SELECT count(*) FROM ff_flow), (SELECT count(*) FROM ff_execution),
		(SELECT count(*) FROM ff_compensation), (SELECT count(*) FROM ff_subflow)`).Scan(&flowsWritten, &execs, &comps, &subs); err != nil {
		t.Fatal(err)
	}
	if flowsWritten+execs+comps+subs != 0 {
		t.Fatalf("refused input wrote %d flows, %d executions, %d compensations, %d sub-flows; want nothing", flowsWritten, execs, comps, subs)
	}

	// AddCompensation, for flows built member by member.
	fl, err := f.client.CreateFlow(f.Ctx, ffd.CreateFlowParams{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateInFlow(f.Ctx, fl.Flow.ID, ffd.CreateParams{Lane: "sub", Step: "pay"}); err != nil {
		t.Fatal(err)
	}
	undo := ffd.CreateParams{Lane: "sub", Kind: "refund"}
	if err := f.client.AddCompensation(f.Ctx, fl.Flow.ID, "missing", undo); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("a compensation of a missing step: %v; want a validation error", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_compensation`) + f.Count(`SELECT count(*) FROM ff_flow WHERE compensation IS NOT NULL`); n != 0 {
		t.Errorf("a refused compensation wrote %d rows; want none", n)
	}
	if err := f.client.AddCompensation(f.Ctx, fl.Flow.ID, "pay", undo); err != nil {
		t.Fatal(err)
	}
	if err := f.client.AddCompensation(f.Ctx, fl.Flow.ID, "pay", undo); !errors.Is(err, ffd.ErrConflict) {
		t.Errorf("a second compensation of one step: %v; want a conflict", err)
	}
	got, err := f.client.DescribeFlow(f.Ctx, fl.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Compensation != ffd.CompensationArmed {
		t.Errorf("a flow given a compensation is %q; want armed", got.Compensation)
	}
	if _, err := f.client.CancelFlow(f.Ctx, fl.Flow.ID, ffd.CancelFlowOnly, "test"); err != nil {
		t.Fatal(err)
	}
	if err := f.client.AddCompensation(f.Ctx, fl.Flow.ID, ffd.OnFailureStep, undo); !errors.Is(err, ffd.ErrAlreadyTerminal) {
		t.Errorf("a compensation added to a finished flow: %v; want already terminal", err)
	}
}

// Rerunning a failed child reruns its parent: the parent's failed
// sub-flow step reruns the old child, whose completed steps are carried
// over, not run again.
func TestSubflowRerunGoesBothWays(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	var mu sync.Mutex
	runs := map[string]int{}
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "ok", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		runs[job.Step]++
		return job.Payload, nil
	})
	ffd.HandleBytes(kinds, "flaky", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		mu.Lock()
		defer mu.Unlock()
		if runs[job.Step]++; runs[job.Step] == 1 {
			return nil, ffd.Permanent(errors.New("first run fails"))
		}
		return []byte(`"fixed"`), nil
	})
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sub"}, Kinds: kinds, Concurrency: 4, PollInterval: 20 * time.Millisecond})
	done := &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "d", Params: ffd.CreateParams{Lane: "sub", Kind: "ok"}}}}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "child", Flow: childOf("flaky")}, {Ref: "done", Flow: done}}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID); err != nil || out.Flow.State != ffd.FlowFailed || out.Steps["done"].State != ffd.StateCompleted {
		t.Fatalf("the parent: %v, %v; want failed, its step done completed", out, err)
	}
	oldChild := f.waitChild(sub.Executions["child"].ID)
	oldDone := f.waitChild(sub.Executions["done"].ID)
	rerun, err := f.client.RerunFlow(f.Ctx, oldChild.ID)
	if err != nil {
		t.Fatal(err)
	}
	if rerun.Flow.RerunOf == nil || *rerun.Flow.RerunOf != sub.Flow.ID {
		t.Fatalf("rerunning the child made flow %s rerunning %v; want a rerun of the parent %s", rerun.Flow.ID, rerun.Flow.RerunOf, sub.Flow.ID)
	}
	out, err := f.client.WaitFlow(f.Ctx, rerun.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted {
		t.Fatalf("the rerun parent is %s; want completed", out.Flow.State)
	}
	newChild, err := f.client.ChildFlow(f.Ctx, out.Steps["child"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if newChild.RerunOf == nil || *newChild.RerunOf != oldChild.ID {
		t.Fatalf("the new child reruns %v; want the old child %s", newChild.RerunOf, oldChild.ID)
	}
	// The step carried over keeps its old child, and nothing of the rerun
	// is left for the daemon to watch.
	if carried, err := f.client.ChildFlow(f.Ctx, out.Steps["done"].ID); err != nil || carried == nil || carried.ID != oldDone.ID {
		t.Fatalf("the carried step's child: %v, %v; want the old one %s", carried, err, oldDone.ID)
	}
	f.WaitFor("every sub-flow step of the rerun marked ended", func() bool {
		return f.Count(`SELECT count(*) FROM ff_subflow WHERE flow_id = $1 AND ended_at IS NULL`, rerun.Flow.ID) == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if runs["a"] != 1 || runs["b"] != 2 || runs["d"] != 1 {
		t.Fatalf("a ran %d times, b %d, d %d; want a once (carried over), b twice, d once (its step carried over)", runs["a"], runs["b"], runs["d"])
	}
	f.checkInvariants()
}

// A step spawns a sub-flow at run time, with a compensated step; the
// join after it waits for the child.
func TestSubflowSpawnedAtRunTime(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	kinds := echoKinds()
	ffd.HandleBytes(kinds, "plan", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		err := job.Spawn(ffd.SpawnParams{
			Nodes: []ffd.SubmitNode{
				{Ref: "child", Flow: childOf("ok"), Compensate: &ffd.CreateParams{Lane: "sub", Kind: "ok"}},
				{Ref: "join", Params: ffd.CreateParams{Lane: "sub", Kind: "ok", Payload: []byte(`"joined"`)}},
			},
			Edges: []ffd.SubmitEdge{{From: "child", To: "join"}},
		})
		return nil, err
	})
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sub"}, Kinds: kinds, Concurrency: 4, PollInterval: 20 * time.Millisecond})
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "plan", Params: ffd.CreateParams{Lane: "sub", Kind: "plan"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted || out.Steps["child"].State != ffd.StateCompleted || string(out.Steps["join"].Result) != `"joined"` {
		t.Fatalf("flow %s, child %v, join %v; want all completed", out.Flow.State, out.Steps["child"], out.Steps["join"])
	}
	if out.Flow.Compensation == "" {
		t.Fatal("a flow a spawn gave a compensation is not armed")
	}
	f.checkInvariants()
}

// A sub-flow step that ends before it starts a child (its parent
// cancelled while it waits for an upstream) is done with: the daemon
// marks it ended, so nothing watches it, and retention may take it.
func TestSubflowEndedBeforeItStarted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "gate", Params: ffd.CreateParams{Lane: "nobody"}}, {Ref: "child", Flow: childOf("ok")}},
		Edges: []ffd.SubmitEdge{{From: "gate", To: "child"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CancelFlow(f.Ctx, sub.Flow.ID, ffd.CancelAll, "test"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the cancelled sub-flow step marked ended", func() bool {
		return f.Count(`SELECT count(*) FROM ff_subflow WHERE flow_id = $1 AND ended_at IS NULL`, sub.Flow.ID) == 0
	})
	if child, err := f.client.ChildFlow(f.Ctx, sub.Executions["child"].ID); err != nil || child != nil {
		t.Fatalf("the child of a step cancelled before it started: %v, %v; want none", child, err)
	}
}

// A sub-flow step past its deadline expires, and its child is cancelled
// with it.
func TestSubflowDeadlineCancelsTheChild(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	waiting := &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "w", Params: ffd.CreateParams{Lane: "nobody"}}}}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "child", Params: ffd.CreateParams{Deadline: time.Hour}, Flow: waiting}}})
	if err != nil {
		t.Fatal(err)
	}
	child := f.waitChild(sub.Executions["child"].ID)
	// The deadline passes once the child runs: a deadline of half a
	// second could pass first on a busy machine, and the step expire
	// before the daemon started any child.
	id := sub.Executions["child"].ID
	f.Exec(`UPDATE ff_execution SET deadline_at = now() WHERE partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID)
	out, err := f.client.WaitFlow(f.Ctx, child.ID)
	if err != nil {
		t.Fatal(err)
	}
	step, err := f.client.Get(f.Ctx, sub.Executions["child"].ID)
	if err != nil {
		t.Fatal(err)
	}
	if step.State != ffd.StateExpired || out.Flow.State != ffd.FlowCancelled || out.Steps["w"].State != ffd.StateCancelled {
		t.Fatalf("step %s, child %s, its step %s; want the step expired, the child and its step cancelled", step.State, out.Flow.State, out.Steps["w"].State)
	}
	f.checkInvariants()
}
