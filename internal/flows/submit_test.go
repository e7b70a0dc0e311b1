package flows_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
)

func TestSubmitThousandNodes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// A root fanning out to 998 middles that join into a sink, plus policies.
	p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{Kind: "big"}}
	p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: "root", Params: ffdtype.CreateParams{Lane: "big"}})
	for i := range 998 {
		ref := fmt.Sprint("m", i)
		p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: ref, Params: ffdtype.CreateParams{Lane: "big", Priority: i % 3}})
		p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: "root", To: ref}, ffdtype.SubmitEdge{From: ref, To: "sink"})
	}
	p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: "sink", Params: ffdtype.CreateParams{Lane: "big"},
		Policy: &ffdtype.Policy{Kind: ffdtype.Quorum, K: 500, OnSatisfied: ffdtype.CancelRemaining}})
	res, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Executions) != 1000 || res.Flow.NodeCount != 1000 || res.Flow.EdgeCount != 1996 {
		t.Fatalf("submitted %d executions, flow %+v", len(res.Executions), res.Flow)
	}
	if got := res.Executions["root"].State; got != ffdtype.StatePending {
		t.Fatalf("root %s, want pending", got)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state = 'blocked'`, res.Flow.ID); n != 999 {
		t.Fatalf("%d blocked, want 999", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND partition_key = $2`, res.Flow.ID, res.Flow.Partition); n != 1000 {
		t.Fatalf("%d members on the flow's partition, want 1000", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_edge WHERE flow_id = $1 AND state = 'applied'`, res.Flow.ID); n != 1996 {
		t.Fatalf("%d applied edges, want 1996", n)
	}
	desc, err := flows.Describe(f.Ctx, f.Pool, res.Flow.ID)
	if err != nil || len(desc.Groups) != 999 {
		t.Fatalf("describe: %d groups, %v", len(desc.Groups), err)
	}
	for _, g := range desc.Groups {
		if g.Downstream == res.Executions["sink"].ID {
			if g.Policy.Kind != ffdtype.Quorum || g.Policy.K != 500 || g.Counts.Total != 998 {
				t.Fatalf("sink group %+v", g)
			}
		} else if g.Policy.Kind != ffdtype.AllOf || g.Counts.Total != 1 {
			t.Fatalf("middle group %+v", g)
		}
	}
}

func TestSubmitInvalidWritesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	node := func(ref string) ffdtype.SubmitNode {
		return ffdtype.SubmitNode{Ref: ref, Params: ffdtype.CreateParams{Lane: "s"}}
	}
	base := func() ffdtype.SubmitFlowParams {
		return ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{node("a"), node("b"), node("c")},
			Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}, {From: "b", To: "c"}}}
	}
	tests := []struct {
		name   string
		mutate func(*ffdtype.SubmitFlowParams)
		kind   ffdtype.ValidationKind
	}{
		{"cycle", func(p *ffdtype.SubmitFlowParams) { p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: "c", To: "a"}) }, ffdtype.KindCycle},
		{"unknown node", func(p *ffdtype.SubmitFlowParams) { p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: "a", To: "zz"}) }, ffdtype.KindInvalidValue},
		{"self edge", func(p *ffdtype.SubmitFlowParams) { p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: "b", To: "b"}) }, ffdtype.KindInvalidValue},
		{"duplicate edge", func(p *ffdtype.SubmitFlowParams) { p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: "a", To: "b"}) }, ffdtype.KindInvalidValue},
		{"duplicate ref", func(p *ffdtype.SubmitFlowParams) { p.Nodes = append(p.Nodes, node("a")) }, ffdtype.KindInvalidValue},
		{"empty ref", func(p *ffdtype.SubmitFlowParams) { p.Nodes = append(p.Nodes, node("")) }, ffdtype.KindInvalidValue},
		{"quorum k zero", func(p *ffdtype.SubmitFlowParams) { p.Nodes[2].Policy = &ffdtype.Policy{Kind: ffdtype.Quorum} }, ffdtype.KindOutOfRange},
		{"quorum k over in-degree", func(p *ffdtype.SubmitFlowParams) { p.Nodes[2].Policy = &ffdtype.Policy{Kind: ffdtype.Quorum, K: 2} }, ffdtype.KindOutOfRange},
		{"unknown policy", func(p *ffdtype.SubmitFlowParams) { p.Nodes[2].Policy = &ffdtype.Policy{Kind: "most_of"} }, ffdtype.KindInvalidValue},
		{"policy on a root", func(p *ffdtype.SubmitFlowParams) { p.Nodes[0].Policy = &ffdtype.Policy{Kind: ffdtype.AnyOf} }, ffdtype.KindInvalidValue},
		{"bad lane", func(p *ffdtype.SubmitFlowParams) { p.Nodes[1].Params.Lane = "no spaces" }, ffdtype.KindInvalidValue},
		{"bad ttl", func(p *ffdtype.SubmitFlowParams) { p.Nodes[1].Params.LeaseTTL = -1 }, ffdtype.KindOutOfRange},
		{"no nodes", func(p *ffdtype.SubmitFlowParams) { p.Nodes, p.Edges = nil, nil }, ffdtype.KindOutOfRange},
		{"too many nodes", func(p *ffdtype.SubmitFlowParams) {
			for i := range flows.MaxSubmitNodes {
				p.Nodes = append(p.Nodes, node(fmt.Sprint("x", i)))
			}
		}, ffdtype.KindOutOfRange},
		{"too many edges", func(p *ffdtype.SubmitFlowParams) {
			p.Edges = append(p.Edges, make([]ffdtype.SubmitEdge, flows.MaxSubmitEdges)...)
		}, ffdtype.KindOutOfRange},
	}
	for _, tt := range tests {
		p := base()
		tt.mutate(&p)
		_, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, p)
		var ve *ffdtype.ValidationError
		if !errors.As(err, &ve) || ve.Kind != tt.kind {
			t.Errorf("%s: %v, want a %s validation error", tt.name, err, tt.kind)
		}
	}
	// A submission failing inside the transaction (flow id taken) also
	// leaves nothing of its own.
	ok, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, base())
	if err != nil {
		t.Fatal(err)
	}
	again := base()
	again.Flow.ID = ok.Flow.ID
	if _, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, again); !errors.Is(err, ffdtype.ErrConflict) {
		t.Fatalf("resubmitting a flow id: %v, want conflict", err)
	}
	if n := f.Count(`SELECT (SELECT count(*) FROM ff_flow) + (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_edge) + (SELECT count(*) FROM ff_edge_group)`); n != 1+3+2+2 {
		t.Fatalf("%d rows in all, want exactly the one good submission's 8", n)
	}
}
