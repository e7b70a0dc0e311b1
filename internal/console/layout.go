package console

import (
	"sort"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Geometry of a drawn flow, in SVG units.
const (
	nodeW, nodeH = 150, 34
	colGap       = 60
	rowGap       = 18
	margin       = 16
)

// gnode is one step as drawn.
type gnode struct {
	ID, Name, Kind, State string
	Join                  string // the group's policy and decision, "" for a root
	X, Y                  int
	layer                 int
}

// gedge is one edge as drawn, from the right of its upstream to the left
// of its downstream.
type gedge struct {
	X1, Y1, X2, Y2 int
	State, Outcome string
}

// graph is a flow laid out in layers: a step's layer is the length of the
// longest path from a root to it, so every edge points right; steps of a
// layer are sorted by name.
type graph struct {
	Nodes         []*gnode
	Edges         []gedge
	Width, Height int
}

func layout(members []*store.Execution, edges []*store.Edge, groups []store.EdgeGroup) *graph {
	byID := make(map[ident.ExecutionID]*gnode, len(members))
	g := &graph{}
	for _, x := range members {
		name := x.Step
		if name == "" {
			name = x.ID.UUID.String()[:8]
		}
		n := &gnode{ID: x.ID.String(), Name: name, Kind: x.Kind, State: string(x.State)}
		byID[x.ID] = n
		g.Nodes = append(g.Nodes, n)
	}
	for _, gr := range groups {
		if n := byID[gr.Downstream]; n != nil {
			n.Join = policyLabel(gr.Policy) + " · " + string(gr.Decision)
		}
	}
	layers(byID, edges)
	rows := map[int][]*gnode{}
	for _, n := range g.Nodes {
		rows[n.layer] = append(rows[n.layer], n)
	}
	for layer, ns := range rows {
		sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
		for i, n := range ns {
			n.X = margin + layer*(nodeW+colGap)
			n.Y = margin + i*(nodeH+rowGap)
			g.Width = max(g.Width, n.X+nodeW+margin)
			g.Height = max(g.Height, n.Y+nodeH+margin)
		}
	}
	for _, e := range edges {
		u, d := byID[e.Upstream], byID[e.Downstream]
		if u == nil || d == nil {
			continue
		}
		g.Edges = append(g.Edges, gedge{X1: u.X + nodeW, Y1: u.Y + nodeH/2, X2: d.X, Y2: d.Y + nodeH/2,
			State: string(e.State), Outcome: string(e.ResolvedOutcome)})
	}
	return g
}

// layers sets each node's layer to its longest distance from a root
// (Kahn's order; a flow is acyclic).
func layers(byID map[ident.ExecutionID]*gnode, edges []*store.Edge) {
	indeg := map[ident.ExecutionID]int{}
	out := map[ident.ExecutionID][]ident.ExecutionID{}
	for _, e := range edges {
		if byID[e.Upstream] == nil || byID[e.Downstream] == nil {
			continue
		}
		indeg[e.Downstream]++
		out[e.Upstream] = append(out[e.Upstream], e.Downstream)
	}
	var queue []ident.ExecutionID
	for id := range byID {
		if indeg[id] == 0 {
			queue = append(queue, id)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, d := range out[id] {
			byID[d].layer = max(byID[d].layer, byID[id].layer+1)
			if indeg[d]--; indeg[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
}

func policyLabel(p store.Policy) string {
	switch p.Kind {
	case store.Quorum:
		return "quorum " + itoa(p.K)
	case store.AnyOf:
		return "any_of"
	}
	return string(p.Kind)
}
