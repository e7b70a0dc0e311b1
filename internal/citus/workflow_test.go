//go:build citus

package citus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// Durable workflows on Citus: a map at run time into a join, a sleep, a
// signal sent before its wait and one sent to a waiting step, results
// waited for by notification, and the sweep's signal step.
func TestDurableWorkflow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.daemon(t)
	lane := f.lane("durable")
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "split", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		items := make([]ffd.CreateParams, 20)
		for i := range items {
			items[i] = ffd.CreateParams{Lane: lane, Kind: "item", Payload: []byte(strconv.Itoa(i + 1))}
		}
		return nil, job.Spawn(ffd.MapInto("item", items, "sum"))
	})
	ffd.HandleBytes(kinds, "item", func(ctx context.Context, job *ffd.Job) ([]byte, error) { return job.Payload, nil })
	ffd.HandleBytes(kinds, "nap", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		if w, err := job.Wake(ctx); err != nil || w == nil {
			return nil, ffd.Sleep(300 * time.Millisecond)
		}
		return []byte("0"), nil
	})
	ffd.HandleBytes(kinds, "gate", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		w, err := job.Wake(ctx)
		if err != nil {
			return nil, err
		}
		if w == nil {
			return nil, ffd.WaitForSignal("go", time.Minute)
		}
		if w.Received == nil {
			return nil, ffd.Permanent(fmt.Errorf("woken by %s", w.Reason))
		}
		return w.Received.Payload, nil
	})
	ffd.HandleBytes(kinds, "sum", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		us, err := job.Upstreams(ctx)
		if err != nil {
			return nil, err
		}
		sum := 0
		for _, u := range us {
			n, _ := strconv.Atoi(string(u.Result))
			sum += n
		}
		return []byte(strconv.Itoa(sum)), nil
	})
	w, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: []string{lane}, Concurrency: 8, Kinds: kinds})
	if err != nil {
		t.Fatal(err)
	}
	spec := ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "split", Params: ffd.CreateParams{Lane: lane, Kind: "split"}},
			{Ref: "nap", Params: ffd.CreateParams{Lane: lane, Kind: "nap"}},
			{Ref: "gate", Params: ffd.CreateParams{Lane: lane, Kind: "gate"}},
			{Ref: "early", Params: ffd.CreateParams{Lane: lane, Kind: "gate"}},
			{Ref: "sum", Params: ffd.CreateParams{Lane: lane, Kind: "sum"}},
		},
		Edges: []ffd.SubmitEdge{{From: "split", To: "sum"}, {From: "nap", To: "sum"}, {From: "gate", To: "sum"}, {From: "early", To: "sum"}},
	}
	sub, err := f.client.SubmitFlow(f.ctx, spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	// Sent before its step runs: kept until the step waits.
	if res, err := f.client.Signal(f.ctx, ffd.SignalParams{Execution: &sub.Executions["early"].ID, Name: "go", Payload: []byte("1000")}); err != nil || res.Woke != nil {
		t.Fatalf("signal before the wait: %+v, %v; want it kept", res, err)
	}
	if err := w.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	})
	waitFor(t, f, "the gate to wait", func() (bool, error) {
		w, err := f.client.Wake(f.ctx, sub.Executions["gate"].ID)
		return w != nil && w.Waiting, err
	})
	res, err := f.client.Signal(f.ctx, ffd.SignalParams{FlowID: &sub.Flow.ID, Name: "go", Payload: []byte("10000")})
	if err != nil || res.Woke == nil || *res.Woke != sub.Executions["gate"].ID {
		t.Fatalf("signal the flow: %+v, %v; want it to wake the gate", res, err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
	defer cancel()
	out, err := f.client.WaitFlow(ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted || string(out.Steps["sum"].Result) != "11210" || len(out.Members) != 25 {
		t.Fatalf("flow %s, sum %q, %d members; want completed, 11210 (1..20, 1000, 10000), 25", out.Flow.State, out.Steps["sum"].Result, len(out.Members))
	}
	if _, err := f.client.Signal(f.ctx, ffd.SignalParams{FlowID: &sub.Flow.ID, Name: "go"}); !errors.As(err, new(*ffd.AlreadyTerminalError)) {
		t.Fatalf("signal a finished flow: %v; want an AlreadyTerminalError", err)
	}
	sigs, err := f.client.FlowSignals(f.ctx, sub.Flow.ID, 10)
	if err != nil || len(sigs) != 2 {
		t.Fatalf("signals of the flow: %d, %v; want 2", len(sigs), err)
	}
	time.Sleep(time.Second)
	if !d.Ready() {
		t.Error("the daemon is not ready: a sweep step (the signal match among them) fails on Citus")
	}
}

// Signals racing waits, and spawns racing into one join, on Citus.
func TestRacesOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("race")
	const n = 20
	nodes := []ffd.SubmitNode{{Ref: "join", Params: ffd.CreateParams{Lane: f.lane("race.join")}}}
	var edges []ffd.SubmitEdge
	for i := range n {
		ref := fmt.Sprintf("root-%d", i)
		nodes = append(nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}})
		edges = append(edges, ffd.SubmitEdge{From: ref, To: "join"})
	}
	sub, err := f.client.SubmitFlow(f.ctx, ffd.SubmitFlowParams{Nodes: nodes, Edges: edges})
	if err != nil {
		t.Fatal(err)
	}
	roots, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/race", Max: n})
	if err != nil || len(roots) != n {
		t.Fatalf("claim: %d, %v", len(roots), err)
	}
	// Half wait for a signal raced by its sending; half spawn into the join.
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, x := range roots {
		if i%2 == 0 {
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, err := f.client.Suspend(f.ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "go"})
				errs <- err
			}()
			go func() {
				defer wg.Done()
				_, err := f.client.Signal(f.ctx, ffd.SignalParams{Execution: &x.ID, Name: "go"})
				errs <- err
			}()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, err := f.client.CompleteAndSpawn(f.ctx, x.ID, x.LeaseEpoch, nil, ffd.MapInto("c-"+x.Step, []ffd.CreateParams{{Lane: lane}}, "join"))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, x := range roots {
		if i%2 != 0 {
			continue
		}
		w, err := f.client.Wake(f.ctx, x.ID)
		if err != nil || w == nil || w.Reason != ffd.WokenBySignal {
			t.Fatalf("%s after its wait raced its signal: %+v, %v; want woken by it", x.ID, w, err)
		}
	}
	if got, err := f.count(`SELECT total FROM ff_edge_group WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`,
		sub.Flow.Partition, sub.Flow.ID, sub.Executions["join"].ID.UUID); err != nil || got != n+n/2 {
		t.Fatalf("the join counts %d upstreams (%v); want %d", got, err, n+n/2)
	}
}

// Sub-flows, compensations and versions on Citus: a versioned flow
// whose sub-flow completes and whose last step fails runs its
// compensation; a parent cancelled while its child runs cancels the
// child; each on the flow's one partition.
func TestLinkedFlowsOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.daemon(t)
	lane := f.lane("linked")
	version := f.prefix + "-v1"
	var undone atomic.Int32
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "ok", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		if job.Version != version {
			return nil, ffd.Permanent(fmt.Errorf("a step of version %q on a %s worker", job.Version, version))
		}
		return []byte(`"ok"`), nil
	})
	ffd.HandleBytes(kinds, "boom", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		return nil, ffd.Permanent(errors.New("boom"))
	})
	ffd.HandleBytes(kinds, "undo", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		undone.Add(1)
		return nil, nil
	})
	f.startWorker(t, ffd.WorkerConfig{Lanes: []string{lane}, Concurrency: 8, Kinds: kinds, Versions: []string{version}})
	ok := ffd.CreateParams{Lane: lane, Kind: "ok"}
	sub, err := f.client.SubmitFlow(f.ctx, ffd.SubmitFlowParams{
		Flow: ffd.CreateFlowParams{Version: version},
		Nodes: []ffd.SubmitNode{
			{Ref: "pay", Params: ok, Compensate: &ffd.CreateParams{Lane: lane, Kind: "undo"}},
			{Ref: "child", Flow: &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ok}, {Ref: "b", Params: ok}},
				Edges: []ffd.SubmitEdge{{From: "a", To: "b"}}}},
			{Ref: "boom", Params: ffd.CreateParams{Lane: lane, Kind: "boom"}},
		},
		Edges: []ffd.SubmitEdge{{From: "pay", To: "child"}, {From: "child", To: "boom"}},
	})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 2*time.Minute)
	defer cancel()
	comp, err := f.client.WaitCompensation(ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.client.WaitFlow(ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowFailed || out.Steps["child"].State != ffd.StateCompleted || comp == nil ||
		comp.Flow.State != ffd.FlowCompleted || comp.Steps["pay"] == nil || undone.Load() != 1 || comp.Flow.Partition != sub.Flow.Partition {
		t.Fatalf("flow %s, sub-flow step %s, compensation %+v, %d undone; want failed, completed, pay's compensation once on the flow's partition",
			out.Flow.State, out.Steps["child"].State, comp, undone.Load())
	}

	// Cancel the parent while its child waits for a lane nobody serves.
	waiting, err := f.client.SubmitFlow(f.ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "child",
		Flow: &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "w", Params: ffd.CreateParams{Lane: f.lane("nobody")}}}}}}})
	if err != nil {
		t.Fatal(err)
	}
	var child *ffd.Flow
	waitFor(t, f, "the child to start", func() (bool, error) {
		child, err = f.client.ChildFlow(f.ctx, waiting.Executions["child"].ID)
		return child != nil, err
	})
	if _, err := f.client.CancelFlow(f.ctx, waiting.Flow.ID, ffd.CancelAll, "test"); err != nil {
		t.Fatal(err)
	}
	done, err := f.client.WaitFlow(ctx, child.ID)
	if err != nil || done.Flow.State != ffd.FlowCancelled {
		t.Fatalf("the child of a cancelled parent: %v, %v; want cancelled", done, err)
	}
	if _, err := f.client.SubmitFlow(f.ctx, ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{Version: f.prefix + "-unknown"},
		Nodes: []ffd.SubmitNode{{Ref: "x", Params: ok}}}); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("a flow of an unknown version: %v; want a validation error", err)
	}
	if vs, err := f.client.ListVersions(f.ctx, ""); err != nil || !slices.ContainsFunc(vs, func(v *ffd.Version) bool { return v.Version == version }) {
		t.Fatalf("versions: %v, %v; want %s among them", vs, err, version)
	}
}
