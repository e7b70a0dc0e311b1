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
