package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// sumUpstreams is a join's handler: the sum of its upstreams' results.
func sumUpstreams(ctx context.Context, job *ffd.Job) ([]byte, error) {
	us, err := job.Upstreams(ctx)
	if err != nil {
		return nil, err
	}
	sum := 0
	for _, u := range us {
		n, err := strconv.Atoi(string(u.Result))
		if err != nil {
			return nil, ffd.Permanent(fmt.Errorf("upstream %s: %w", u.Step, err))
		}
		sum += n
	}
	return []byte(strconv.Itoa(sum)), nil
}

// A step maps over a list at run time: one child per item and a join
// that waits for them all, added with its completion.
func TestSpawnMapsAndJoins(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "split", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		items := make([]ffd.CreateParams, 20)
		for i := range items {
			items[i] = ffd.CreateParams{Lane: "map", Kind: "item", Payload: []byte(strconv.Itoa(i + 1))}
		}
		if err := job.Spawn(ffd.Map("item", items, &ffd.SubmitNode{Ref: "sum", Params: ffd.CreateParams{Lane: "map", Kind: "sum"}})); err != nil {
			return nil, err
		}
		return []byte("0"), nil
	})
	ffd.HandleBytes(kinds, "item", func(ctx context.Context, job *ffd.Job) ([]byte, error) { return job.Payload, nil })
	ffd.HandleBytes(kinds, "sum", sumUpstreams)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"map"}, Kinds: kinds, Concurrency: 8, PollInterval: 50 * time.Millisecond})
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "split", Params: ffd.CreateParams{Lane: "map", Kind: "split"}}}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted || len(out.Members) != 22 || out.Flow.NodeCount != 22 || out.Flow.EdgeCount != 20 {
		t.Fatalf("flow %s with %d members (node_count %d, edge_count %d); want completed with 22 and 20 edges",
			out.Flow.State, len(out.Members), out.Flow.NodeCount, out.Flow.EdgeCount)
	}
	if got := string(out.Steps["sum"].Result); got != "210" {
		t.Fatalf("the join summed %s; want 210 (1..20)", got)
	}
	for i := range 20 {
		if x := out.Steps[fmt.Sprintf("item-%d", i)]; x == nil || x.State != ffd.StateCompleted {
			t.Fatalf("child item-%d: %+v; want completed", i, x)
		}
	}
	f.checkInvariants()
}

// Twenty steps spawn a child each into one join, at once: the join waits
// for all forty upstreams and runs once, after every child.
func TestSpawnTwentyConcurrentChildrenIntoOneJoin(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	const n = 20
	nodes := []ffd.SubmitNode{{Ref: "join", Params: ffd.CreateParams{Lane: "join", Kind: "sum"}}}
	var edges []ffd.SubmitEdge
	for i := range n {
		ref := fmt.Sprintf("root-%d", i)
		nodes = append(nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: "roots", Payload: []byte(strconv.Itoa(i))}})
		edges = append(edges, ffd.SubmitEdge{From: ref, To: "join"})
	}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: nodes, Edges: edges})
	if err != nil {
		t.Fatal(err)
	}
	roots, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "roots", Worker: "w/roots", Max: n})
	if err != nil || len(roots) != n {
		t.Fatalf("claim the roots: %d, %v", len(roots), err)
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for _, x := range roots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			child := []ffd.CreateParams{{Lane: "children", Payload: []byte("100")}}
			_, _, err := f.client.CompleteAndSpawn(f.Ctx, x.ID, x.LeaseEpoch, []byte("1"), ffd.MapInto("child-of-"+x.Step, child, "join"))
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if got := f.Count(`SELECT total FROM ff_edge_group WHERE downstream_id = $1`, sub.Executions["join"].ID.UUID); got != 2*n {
		t.Fatalf("the join counts %d upstreams; want %d", got, 2*n)
	}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"children", "join"}, Concurrency: 4, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			if job.Kind == "sum" {
				return sumUpstreams(ctx, job)
			}
			return job.Payload, nil
		}})
	out, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	join := out.Steps["join"]
	if out.Flow.State != ffd.FlowCompleted || join.State != ffd.StateCompleted || string(join.Result) != strconv.Itoa(n*1+n*100) || join.Attempt != 1 {
		t.Fatalf("flow %s, join %s with %q after %d attempts; want completed, %d, once", out.Flow.State, join.State, join.Result, join.Attempt, n+n*100)
	}
	for _, x := range out.Members {
		if x.Step != "join" && x.TerminalAt.After(*join.StartedAt) {
			t.Fatalf("%s ended at %s, after the join started at %s", x.Step, x.TerminalAt, join.StartedAt)
		}
	}
	f.checkInvariants()
}

// A spawner whose lease is lost adds nothing, through the API and
// through a worker.
func TestSpawnWithALostLeaseAddsNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "a", Params: ffd.CreateParams{Lane: "lost"}},
		{Ref: "b", Params: ffd.CreateParams{Lane: "lost.worker"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	x := f.claimOne(sub.Executions["a"])
	if _, err := f.client.Revoke(f.Ctx, x.ID, "operator"); err != nil {
		t.Fatal(err)
	}
	spawn := ffd.Map("c", []ffd.CreateParams{{Lane: "lost"}, {Lane: "lost"}}, &ffd.SubmitNode{Ref: "j", Params: ffd.CreateParams{Lane: "lost"}})
	if _, _, err := f.client.CompleteAndSpawn(f.Ctx, x.ID, x.LeaseEpoch, nil, spawn); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Fatalf("spawn with a revoked lease: %v; want ErrLeaseLost", err)
	}
	// A worker's handler spawns, then its execution is cancelled before
	// it returns.
	spawned := make(chan struct{})
	release := make(chan struct{})
	w := f.startWorker(ffd.WorkerConfig{Lanes: []string{"lost.worker"}, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			if err := job.Spawn(ffd.Map("w", []ffd.CreateParams{{Lane: "lost"}}, nil)); err != nil {
				return nil, err
			}
			close(spawned)
			<-release
			return nil, nil
		}})
	<-spawned
	if _, err := f.client.Cancel(f.Ctx, sub.Executions["b"].ID, "no", "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	// Stop returns once the handler has returned and its completion,
	// with its spawn, has been refused.
	stopCtx, cancel := context.WithTimeout(f.Ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1`, sub.Flow.ID); n != 2 {
		t.Fatalf("the flow has %d members after spawns with lost leases; want 2", n)
	}
	if n := f.Count(`SELECT node_count FROM ff_flow WHERE flow_id = $1`, sub.Flow.ID); n != 2 {
		t.Fatalf("node_count %d; want 2", n)
	}
	f.checkInvariants()
}

// Spawns the flow cannot take are refused whole, with typed errors.
func TestSpawnRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "a", Params: ffd.CreateParams{Lane: "refuse"}},
			{Ref: "pending", Params: ffd.CreateParams{Lane: "refuse.other"}},
			{Ref: "after", Params: ffd.CreateParams{Lane: "refuse.other"}},
		},
		Edges: []ffd.SubmitEdge{{From: "a", To: "after"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	x := f.claimOne(sub.Executions["a"])
	var ve *ffd.ValidationError
	var ce *ffd.ConflictError
	cases := []struct {
		name  string
		p     ffd.SpawnParams
		check func(error) bool
	}{
		{"into a step that can start", ffd.MapInto("c", []ffd.CreateParams{{Lane: "refuse"}}, "pending"), func(err error) bool { return errors.As(err, &ve) && ve.Field == "edges.to" }},
		{"into no step", ffd.MapInto("c", []ffd.CreateParams{{Lane: "refuse"}}, "nowhere"), func(err error) bool { return errors.As(err, &ve) && ve.Field == "edges.to" }},
		{"a taken name", ffd.Map("x", nil, &ffd.SubmitNode{Ref: "after", Params: ffd.CreateParams{Lane: "refuse"}}), func(err error) bool { return errors.As(err, &ce) && ce.ID == "after" }},
		{"from an existing step", ffd.SpawnParams{Nodes: []ffd.SubmitNode{{Ref: "n", Params: ffd.CreateParams{Lane: "refuse"}}}, Edges: []ffd.SubmitEdge{{From: "a", To: "n"}}}, func(err error) bool { return errors.As(err, &ve) && ve.Field == "edges.from" }},
		{"a cycle", ffd.SpawnParams{Nodes: []ffd.SubmitNode{{Ref: "p", Params: ffd.CreateParams{Lane: "refuse"}}, {Ref: "q", Params: ffd.CreateParams{Lane: "refuse"}}},
			Edges: []ffd.SubmitEdge{{From: "p", To: "q"}, {From: "q", To: "p"}}}, func(err error) bool { return errors.As(err, &ve) && ve.Kind == ffd.KindCycle }},
		{"nothing", ffd.SpawnParams{}, func(err error) bool { return errors.As(err, &ve) }},
		{"a bad lane", ffd.Map("c", []ffd.CreateParams{{Lane: "bad lane"}}, nil), func(err error) bool { return errors.As(err, &ve) }},
	}
	for _, tc := range cases {
		if _, _, err := f.client.CompleteAndSpawn(f.Ctx, x.ID, x.LeaseEpoch, nil, tc.p); !tc.check(err) {
			t.Fatalf("%s: %v; not the error expected", tc.name, err)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1`, sub.Flow.ID); n != 3 {
		t.Fatalf("refused spawns left %d members; want 3", n)
	}
	got, err := f.client.Get(f.Ctx, x.ID)
	if err != nil || got.State != ffd.StateRunning {
		t.Fatalf("the spawner after refused spawns: %+v, %v; want still running", got, err)
	}
	solo := f.claimOne(f.mustCreate(ffd.CreateParams{Lane: "refuse.solo"}))
	if _, _, err := f.client.CompleteAndSpawn(f.Ctx, solo.ID, solo.LeaseEpoch, nil, ffd.Map("c", []ffd.CreateParams{{Lane: "x"}}, nil)); !errors.As(err, &ve) || ve.Kind != ffd.KindNotMember {
		t.Fatalf("spawn from a solo execution: %v; want a not_member ValidationError", err)
	}
	f.checkInvariants()
}

// A spawned join takes any policy over the new steps: quorum and any_of
// with their settings, and a quorum that could never be met is refused.
func TestSpawnJoinPolicies(t *testing.T) {
	t.Parallel()
	f := setup(t)
	items := []ffd.CreateParams{{Lane: "pol.c"}, {Lane: "pol.c"}, {Lane: "pol.c"}, {Lane: "pol.c"}, {Lane: "pol.c"}}
	for _, tc := range []struct {
		name   string
		policy ffd.Policy
		ok     bool
	}{
		{"quorum 3 of 5", ffd.Policy{Kind: ffd.Quorum, K: 3, OnSatisfied: ffd.CancelRemaining}, true},
		{"any_of", ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.LetRun}, true},
		{"quorum 6 of 5", ffd.Policy{Kind: ffd.Quorum, K: 6, OnSatisfied: ffd.LetRun}, false},
	} {
		sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "root", Params: ffd.CreateParams{Lane: "pol"}}}})
		if err != nil {
			t.Fatal(err)
		}
		x := f.claimOne(sub.Executions["root"])
		pol := tc.policy
		_, spawned, err := f.client.CompleteAndSpawn(f.Ctx, x.ID, x.LeaseEpoch, nil,
			ffd.Map("c", items, &ffd.SubmitNode{Ref: "join", Params: ffd.CreateParams{Lane: "pol.j"}, Policy: &pol}))
		if !tc.ok {
			var ve *ffd.ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("%s: %v; want a ValidationError", tc.name, err)
			}
			if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		fl, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
		if err != nil {
			t.Fatal(err)
		}
		join := spawned.Executions["join"].ID
		var got *ffd.EdgeGroup
		for i := range fl.Groups {
			if fl.Groups[i].Downstream == join {
				got = &fl.Groups[i]
			}
		}
		if got == nil || got.Policy != tc.policy || got.Counts.Total != 5 {
			t.Fatalf("%s: the join's group %+v; want policy %+v over 5", tc.name, got, tc.policy)
		}
	}
	f.checkInvariants()
}
