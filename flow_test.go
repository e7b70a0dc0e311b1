package ffd_test

import (
	"errors"
	"testing"

	"github.com/flowfabric/ffd"
)

func TestFlowAPI(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Flow: ffd.CreateFlowParams{Kind: "report"},
		Nodes: []ffd.SubmitNode{
			{Ref: "fetch", Params: ffd.CreateParams{Lane: "etl", JSON: map[string]string{"src": "s3"}}},
			{Ref: "a", Params: ffd.CreateParams{Lane: "etl"}},
			{Ref: "b", Params: ffd.CreateParams{Lane: "etl"}},
			{Ref: "join", Params: ffd.CreateParams{Lane: "etl"}, Policy: &ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}},
		},
		Edges: []ffd.SubmitEdge{{From: "fetch", To: "a"}, {From: "fetch", To: "b"}, {From: "a", To: "join"}, {From: "b", To: "join"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if sub.Executions["fetch"].State != ffd.StatePending || sub.Executions["join"].State != ffd.StateBlocked {
		t.Fatalf("submitted states: fetch %s join %s", sub.Executions["fetch"].State, sub.Executions["join"].State)
	}
	// Add a node by hand: create in the flow, stage and apply an edge.
	extra, err := f.client.CreateInFlow(f.Ctx, sub.Flow.ID, ffd.CreateParams{Lane: "etl"})
	if err != nil {
		t.Fatal(err)
	}
	desc, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
	if err != nil || len(desc.Groups) != 3 {
		t.Fatalf("describe: %v", err)
	}
	staged, err := f.client.StageEdge(f.Ctx, ffd.StageEdgeParams{FlowID: sub.Flow.ID, Upstream: sub.Executions["join"].ID, Downstream: extra.Execution.ID, ExpectedRevision: desc.GraphRevision})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.StageEdge(f.Ctx, ffd.StageEdgeParams{FlowID: sub.Flow.ID, Upstream: extra.Execution.ID, Downstream: sub.Executions["fetch"].ID, ExpectedRevision: staged.NewRevision}); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("cycle through the public API: %v", err)
	}
	applied, err := f.client.ApplyEdge(f.Ctx, sub.Flow.ID, staged.Edge.ID)
	if err != nil || applied.Unsatisfied != 1 {
		t.Fatalf("apply: %+v %v", applied, err)
	}
	edges, err := f.client.ListEdges(f.Ctx, sub.Flow.ID, sub.Executions["fetch"].ID, ffd.Outgoing)
	if err != nil || len(edges) != 2 {
		t.Fatalf("outgoing of fetch: %d %v", len(edges), err)
	}
	res, err := f.client.CancelFlow(f.Ctx, sub.Flow.ID, ffd.CancelAll, "not needed")
	if err != nil || len(res.Members) != 5 {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	page, err := f.client.ListFlows(f.Ctx, ffd.ListFlowsParams{State: ffd.FlowCancelled})
	if err != nil || len(page.Flows) != 1 {
		t.Fatalf("list cancelled flows: %v", err)
	}
}

// A flow member carries its step name: SubmitFlow names each node by its
// ref, CreateInFlow by CreateParams.Step; a name is unique in its flow,
// and only flow members have one.
func TestStepNames(t *testing.T) {
	t.Parallel()
	f := setup(t)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "fetch", Params: ffd.CreateParams{Lane: "steps"}}, {Ref: "parse", Params: ffd.CreateParams{Lane: "steps"}}},
		Edges: []ffd.SubmitEdge{{From: "fetch", To: "parse"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for ref, x := range sub.Executions {
		got, err := f.client.Get(f.Ctx, x.ID)
		if err != nil || got.Step != ref || x.Step != ref {
			t.Fatalf("node %s: step %q (returned %q), %v; want its ref", ref, got.Step, x.Step, err)
		}
	}
	added, err := f.client.CreateInFlow(f.Ctx, sub.Flow.ID, ffd.CreateParams{Lane: "steps", Step: "report"})
	if err != nil || added.Execution.Step != "report" {
		t.Fatalf("CreateInFlow with a step: %+v, %v; want step report", added, err)
	}
	_, err = f.client.CreateInFlow(f.Ctx, sub.Flow.ID, ffd.CreateParams{Lane: "steps", Step: "parse"})
	var ce *ffd.ConflictError
	if !errors.As(err, &ce) || ce.Object != "step" || ce.ID != "parse" {
		t.Fatalf("a second member named parse: %v; want a ConflictError on the step", err)
	}
	_, err = f.client.Create(f.Ctx, ffd.CreateParams{Lane: "steps", Step: "alone"})
	var ve *ffd.ValidationError
	if !errors.As(err, &ve) || ve.Field != "step" {
		t.Fatalf("a step name outside a flow: %v; want a ValidationError on step", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE step IS NOT NULL`); n != 3 {
		t.Fatalf("%d named members, want 3 (fetch, parse, report)", n)
	}
	// A member's completion event names its step.
	if _, err := f.client.Cancel(f.Ctx, sub.Executions["fetch"].ID, "test", "test"); err != nil {
		t.Fatal(err)
	}
	// The cursor protocol shows an event once every older transaction of
	// the cluster has ended: wait for it.
	f.WaitFor("the completion event of fetch, naming its step", func() bool {
		evs, err := f.client.ReadEvents(f.Ctx, ffd.StreamCompletion, ffd.OutboxCursor{}, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.ExecutionID == sub.Executions["fetch"].ID.String() {
				if e.Step != "fetch" {
					t.Errorf("fetch's completion event names step %q", e.Step)
				}
				return true
			}
		}
		return false
	})
}
