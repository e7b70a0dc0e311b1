package flows

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// One submit_flow is one transaction; these bound its size (a fan-out of
// 10,000 with a join needs 10,002 nodes and 20,000 edges).
const (
	MaxSubmitNodes = 100000
	MaxSubmitEdges = 200000
)

// MaxPayload is the size of the largest payload among p's nodes.
func MaxPayload(p ffdtype.SubmitFlowParams) int {
	n := 0
	for _, node := range p.Nodes {
		n = max(n, len(node.Params.Payload))
	}
	return n
}

// Submit creates a flow with all its executions, edges and policies in one
// transaction (submit_flow): roots start pending, the others blocked with
// their edges already applied. Any invalid part (unknown or duplicate ref,
// self or duplicate edge, cycle, bad policy or execution parameters, a
// bad sub-flow or compensation) rejects the whole submission before
// anything is written.
func Submit(ctx context.Context, db store.DB, lim leases.Limits, p ffdtype.SubmitFlowParams) (*ffdtype.SubmittedFlow, error) {
	sub, err := planSubmit(p, lim, 0, nil)
	if err != nil {
		return nil, err
	}
	var res *ffdtype.SubmittedFlow
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		res, err = sub.write(ctx, tx, store.FlowLinks{})
		return err
	})
	if err != nil {
		return nil, wrapOp("submit flow "+sub.p.Flow.ID.String(), err)
	}
	return res, nil
}

// Validate checks a submission as Submit would, without writing: for a
// submission stored to be made later (a schedule's).
func Validate(p ffdtype.SubmitFlowParams, lim leases.Limits) error {
	_, err := planSubmit(p, lim, 0, nil)
	return err
}

// submission is a validated submission, every row planned: the graph
// (graphOf), the executions and joins (planNodes), and what goes beside
// them (planExtras).
type submission struct {
	p      ffdtype.SubmitFlowParams
	g      *graph
	params []leases.Normalized
	groups []*ffdtype.Policy
	extras *extras
	lim    leases.Limits
}

// planSubmit validates p, nested at depth under the sub-flows in path,
// and plans every row, touching no database.
func planSubmit(p ffdtype.SubmitFlowParams, lim leases.Limits, depth int, path []*ffdtype.SubmitFlowParams) (*submission, error) {
	if err := normalizeFlow(&p.Flow); err != nil {
		return nil, err
	}
	g, err := graphOf(p)
	if err != nil {
		return nil, err
	}
	params, groups, err := planNodes(p, g, lim)
	if err != nil {
		return nil, err
	}
	ex, err := planExtras(p, lim, depth, path)
	if err != nil {
		return nil, err
	}
	return &submission{p: p, g: g, params: params, groups: groups, extras: ex, lim: lim}, nil
}

// graph is a validated submission's shape: node indexes by ref, and each
// node's in-degree and successors.
type graph struct {
	index map[string]int
	indeg []int
	out   [][]int
}

// graphOf validates the nodes and edges of a submission: sizes, refs,
// edge ends, self and duplicate edges, and cycles.
func graphOf(p ffdtype.SubmitFlowParams) (*graph, error) {
	if len(p.Nodes) == 0 || len(p.Nodes) > MaxSubmitNodes {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "nodes", fmt.Sprint(len(p.Nodes)), fmt.Sprintf("want 1..%d nodes", MaxSubmitNodes))
	}
	if len(p.Edges) > MaxSubmitEdges {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "edges", fmt.Sprint(len(p.Edges)), fmt.Sprintf("want at most %d edges", MaxSubmitEdges))
	}
	index, err := indexRefs(p.Nodes)
	if err != nil {
		return nil, err
	}
	g := &graph{index: index, indeg: make([]int, len(p.Nodes)), out: make([][]int, len(p.Nodes))}
	pairs := make(map[[2]int]bool, len(p.Edges))
	for _, e := range p.Edges {
		from, ok := g.index[e.From]
		if !ok {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges.from", e.From, "no node has this ref")
		}
		to, ok := g.index[e.To]
		if !ok {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges.to", e.To, "no node has this ref")
		}
		if from == to {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges", e.From+" -> "+e.To, "an edge cannot join a node to itself")
		}
		if pairs[[2]int{from, to}] {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges", e.From+" -> "+e.To, "duplicate edge")
		}
		pairs[[2]int{from, to}] = true
		g.indeg[to]++
		g.out[from] = append(g.out[from], to)
	}
	if ref := cycleRef(p.Nodes, g.indeg, g.out); ref != "" {
		return nil, fault.Invalid(ffdtype.KindCycle, "edges", ref, "the edges form a cycle through this node")
	}
	return g, nil
}

// indexRefs checks nodes' refs (1 to 128 bytes, no two alike) and
// indexes the nodes by them.
func indexRefs(nodes []ffdtype.SubmitNode) (map[string]int, error) {
	index := make(map[string]int, len(nodes))
	for i, n := range nodes {
		if n.Ref == "" || len(n.Ref) > leases.MaxNameLength {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.ref", n.Ref, "want 1 to 128 bytes")
		}
		if _, dup := index[n.Ref]; dup {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.ref", n.Ref, "duplicate node ref")
		}
		index[n.Ref] = i
	}
	return index, nil
}

// planNodes validates each node's policy and execution parameters and
// returns the executions to create (in node order) and the join policy of
// each node with incoming edges (nil for roots).
func planNodes(p ffdtype.SubmitFlowParams, g *graph, lim leases.Limits) ([]leases.Normalized, []*ffdtype.Policy, error) {
	part := ident.Partition(p.Flow.ID)
	params := make([]leases.Normalized, len(p.Nodes))
	policies := make([]*ffdtype.Policy, len(p.Nodes))
	for i, n := range p.Nodes {
		if n.Policy != nil && g.indeg[i] == 0 {
			return nil, nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.policy", n.Ref, "a node without incoming edges has no join policy")
		}
		if g.indeg[i] > 0 {
			pol := ffdtype.Policy{Kind: ffdtype.AllOf}
			if n.Policy != nil {
				pol = *n.Policy
			}
			if err := NormalizePolicy(&pol); err != nil {
				return nil, nil, refine(err, n.Ref)
			}
			if pol.Kind == ffdtype.Quorum && pol.K > g.indeg[i] {
				return nil, nil, fault.Invalid(ffdtype.KindOutOfRange, "k", fmt.Sprint(pol.K), fmt.Sprintf("node %s has %d incoming edges; a quorum of %d can never be met", n.Ref, g.indeg[i], pol.K))
			}
			policies[i] = &pol
		}
		cp := n.Params
		if cp.IdempotencyKey != "" {
			return nil, nil, fault.Invalid(ffdtype.KindInvalidValue, "idempotency_key", cp.IdempotencyKey, "node "+n.Ref+": use the flow id to make a submission idempotent")
		}
		if cp.Namespace == "" {
			cp.Namespace = p.Flow.Namespace
		}
		if cp.Step != "" && cp.Step != n.Ref {
			return nil, nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.params.step", cp.Step, "node "+n.Ref+": a submitted node's step is its ref; leave step empty")
		}
		cp.Step = n.Ref
		if err := memberVersion(&cp, p.Flow.Version, n.Ref); err != nil {
			return nil, nil, err
		}
		if n.Flow != nil {
			if err := subflowStep(&cp, n.Ref); err != nil {
				return nil, nil, err
			}
		}
		norm, err := leases.Normalize(cp, leases.Placement{FlowID: &p.Flow.ID, Partition: &part, Blocked: g.indeg[i] > 0, Subflow: n.Flow != nil}, lim)
		if err != nil {
			return nil, nil, refine(err, n.Ref)
		}
		params[i] = norm
	}
	return params, policies, nil
}

// write writes a planned submission: the flow, its executions, its
// edges (applied) and groups, the flow's size, and what goes beside them
// (sub-flow steps, compensations, the flow's links, with links' Parent
// for a child). Every row is new, so it takes no lock but the new rows'.
func (s *submission) write(ctx context.Context, tx pgx.Tx, links store.FlowLinks) (*ffdtype.SubmittedFlow, error) {
	p, g, params, policies := s.p, s.g, s.params, s.groups
	f, exists, err := CreateFlow(ctx, tx, p.Flow)
	if err != nil {
		return nil, err
	}
	if exists {
		return nil, &ffdtype.ConflictError{Object: "flow", ID: f.ID.String(), Reason: "a flow with this id already exists", Existing: f}
	}
	xs, err := leases.InsertMany(ctx, tx, params)
	if err != nil {
		return nil, err
	}
	edges := make([]store.NewEdge, len(p.Edges))
	for i, e := range p.Edges {
		edges[i] = store.NewEdge{ID: ident.NewUUID(), Upstream: xs[g.index[e.From]].ID, Downstream: xs[g.index[e.To]].ID,
			DependencyKind: e.DependencyKind, DataPassingRef: e.DataPassingRef}
		if edges[i].DependencyKind == "" {
			edges[i].DependencyKind = DefaultDependencyKind
		}
	}
	if err := store.InsertAppliedEdges(ctx, tx, f.ID, edges); err != nil {
		return nil, fmt.Errorf("insert edges: %w", err)
	}
	var groups []store.NewGroup
	for i, pol := range policies {
		if pol != nil {
			groups = append(groups, store.NewGroup{Downstream: xs[i].ID, Policy: *pol, Total: g.indeg[i]})
		}
	}
	if err := store.InsertGroups(ctx, tx, f.ID, groups); err != nil {
		return nil, fmt.Errorf("insert edge groups: %w", err)
	}
	if f, err = store.SetFlowSize(ctx, tx, f.ID, len(xs), len(edges)); err != nil {
		return nil, fmt.Errorf("record the size of flow %s: %w", p.Flow.ID, err)
	}
	res := &ffdtype.SubmittedFlow{Flow: f, Executions: make(map[string]*ffdtype.Execution, len(xs))}
	for i, x := range xs {
		res.Executions[p.Nodes[i].Ref] = x
	}
	if err := s.extras.write(ctx, tx, res, links); err != nil {
		return nil, err
	}
	return res, nil
}

// cycleRef returns a node on a cycle (Kahn's algorithm leaves exactly the
// nodes on or behind cycles), or "" for a DAG.
func cycleRef(nodes []ffdtype.SubmitNode, indeg []int, out [][]int) string {
	deg := append([]int(nil), indeg...)
	queue := make([]int, 0, len(nodes))
	for i, d := range deg {
		if d == 0 {
			queue = append(queue, i)
		}
	}
	seen := 0
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		seen++
		for _, m := range out[n] {
			if deg[m]--; deg[m] == 0 {
				queue = append(queue, m)
			}
		}
	}
	if seen == len(nodes) {
		return ""
	}
	for i, d := range deg {
		if d > 0 {
			return nodes[i].Ref
		}
	}
	return ""
}

// refine prefixes a validation error's field with the node it is about.
func refine(err error, ref string) error {
	if ve, ok := err.(*ffdtype.ValidationError); ok {
		c := *ve
		c.Field = "nodes[" + ref + "]." + c.Field
		return &c
	}
	return err
}
