package flows

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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

// SubmitNode is one execution of a submitted DAG, named by Ref.
type SubmitNode struct {
	Ref    string
	Params leases.CreateParams
	// Policy joins the node's incoming edges; default all_of. Only for
	// nodes with incoming edges.
	Policy *Policy
}

// SubmitEdge makes To depend on From.
type SubmitEdge struct {
	From, To       string
	DependencyKind string
	DataPassingRef string
}

// SubmitParams is a whole DAG.
type SubmitParams struct {
	Flow  CreateFlowParams
	Nodes []SubmitNode
	Edges []SubmitEdge
}

// Submitted is the created flow and its executions by Ref.
type Submitted struct {
	Flow       *Flow
	Executions map[string]*store.Execution
}

// Submit creates a flow with all its executions, edges and policies in one
// transaction (submit_flow): roots start pending, the others blocked with
// their edges already applied. Any invalid part (unknown or duplicate ref,
// self or duplicate edge, cycle, bad policy or execution parameters)
// rejects the whole submission before anything is written.
func Submit(ctx context.Context, db store.DB, lim leases.Limits, p SubmitParams) (*Submitted, error) {
	if err := p.Flow.normalize(); err != nil {
		return nil, err
	}
	if len(p.Nodes) == 0 || len(p.Nodes) > MaxSubmitNodes {
		return nil, fault.Invalid(fault.KindOutOfRange, "nodes", fmt.Sprint(len(p.Nodes)), fmt.Sprintf("want 1..%d nodes", MaxSubmitNodes))
	}
	if len(p.Edges) > MaxSubmitEdges {
		return nil, fault.Invalid(fault.KindOutOfRange, "edges", fmt.Sprint(len(p.Edges)), fmt.Sprintf("want at most %d edges", MaxSubmitEdges))
	}
	index := make(map[string]int, len(p.Nodes))
	for i, n := range p.Nodes {
		if n.Ref == "" || len(n.Ref) > leases.MaxNameLength {
			return nil, fault.Invalid(fault.KindInvalidValue, "nodes.ref", n.Ref, "want 1 to 128 bytes")
		}
		if _, dup := index[n.Ref]; dup {
			return nil, fault.Invalid(fault.KindInvalidValue, "nodes.ref", n.Ref, "duplicate node ref")
		}
		index[n.Ref] = i
	}
	indeg := make([]int, len(p.Nodes))
	out := make([][]int, len(p.Nodes))
	pairs := map[[2]int]bool{}
	for _, e := range p.Edges {
		from, ok := index[e.From]
		if !ok {
			return nil, fault.Invalid(fault.KindInvalidValue, "edges.from", e.From, "no node has this ref")
		}
		to, ok := index[e.To]
		if !ok {
			return nil, fault.Invalid(fault.KindInvalidValue, "edges.to", e.To, "no node has this ref")
		}
		if from == to {
			return nil, fault.Invalid(fault.KindInvalidValue, "edges", e.From+" -> "+e.To, "an edge cannot join a node to itself")
		}
		if pairs[[2]int{from, to}] {
			return nil, fault.Invalid(fault.KindInvalidValue, "edges", e.From+" -> "+e.To, "duplicate edge")
		}
		pairs[[2]int{from, to}] = true
		indeg[to]++
		out[from] = append(out[from], to)
	}
	if ref := cycleRef(p.Nodes, indeg, out); ref != "" {
		return nil, fault.Invalid(fault.KindCycle, "edges", ref, "the edges form a cycle through this node")
	}
	part := ident.Partition(p.Flow.ID)
	params := make([]leases.CreateParams, len(p.Nodes))
	policies := make([]Policy, len(p.Nodes))
	for i, n := range p.Nodes {
		pol := Policy{Kind: store.AllOf}
		if n.Policy != nil {
			pol = *n.Policy
			if indeg[i] == 0 {
				return nil, fault.Invalid(fault.KindInvalidValue, "nodes.policy", n.Ref, "a node without incoming edges has no join policy")
			}
		}
		if err := pol.Normalize(); err != nil {
			return nil, refine(err, n.Ref)
		}
		if pol.Kind == store.Quorum && pol.K > indeg[i] {
			return nil, fault.Invalid(fault.KindOutOfRange, "k", fmt.Sprint(pol.K), fmt.Sprintf("node %s has %d incoming edges; a quorum of %d can never be met", n.Ref, indeg[i], pol.K))
		}
		policies[i] = pol
		cp := n.Params
		if cp.IdempotencyKey != "" {
			return nil, fault.Invalid(fault.KindInvalidValue, "idempotency_key", cp.IdempotencyKey, "node "+n.Ref+": use the flow id to make a submission idempotent")
		}
		if cp.Namespace == "" {
			cp.Namespace = p.Flow.Namespace
		}
		cp.FlowID, cp.Partition, cp.Blocked = &p.Flow.ID, &part, indeg[i] > 0
		if err := cp.Normalize(lim); err != nil {
			return nil, refine(err, n.Ref)
		}
		params[i] = cp
	}

	var res *Submitted
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		f, exists, err := CreateFlow(ctx, tx, p.Flow)
		if err != nil {
			return err
		}
		if exists {
			return &fault.ConflictError{Object: "flow", ID: f.ID.String(), Reason: "a flow with this id already exists", Existing: f}
		}
		xs, err := leases.CreateMany(ctx, tx, lim, params)
		if err != nil {
			return err
		}
		n := len(p.Edges)
		edgeIDs, ups, downs := make([]uuid.UUID, n), make([]uuid.UUID, n), make([]uuid.UUID, n)
		kinds, refs := make([]string, n), make([]*string, n)
		for i, e := range p.Edges {
			edgeIDs[i], ups[i], downs[i] = ident.NewUUID(), xs[index[e.From]].ID.UUID, xs[index[e.To]].ID.UUID
			kinds[i], refs[i] = e.DependencyKind, nullIfEmpty(e.DataPassingRef)
			if kinds[i] == "" {
				kinds[i] = DefaultDependencyKind
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_id, downstream_id,
				dependency_kind, data_passing_ref, state, applied_at)
			SELECT $1, $2, i.edge_id, i.up, i.down, i.kind, i.ref, 'applied', now()
			FROM unnest($3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[]) AS i(edge_id, up, down, kind, ref)`,
			part, f.ID, edgeIDs, ups, downs, kinds, refs); err != nil {
			return fmt.Errorf("insert edges: %w", err)
		}
		var gDowns []uuid.UUID
		var gKinds []string
		var gK []*int
		var gOn []*string
		var gTotal []int
		for i := range p.Nodes {
			if indeg[i] == 0 {
				continue
			}
			pol := policies[i]
			gDowns, gKinds, gTotal = append(gDowns, xs[i].ID.UUID), append(gKinds, string(pol.Kind)), append(gTotal, indeg[i])
			var k *int
			var on *string
			if pol.Kind == store.Quorum {
				kk := pol.K
				k = &kk
			}
			if pol.Kind != store.AllOf {
				s := string(pol.OnSatisfied)
				on = &s
			}
			gK, gOn = append(gK, k), append(gOn, on)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, policy, k, on_satisfied, total)
			SELECT $1, $2, i.down, i.policy, i.k, i.on_satisfied, i.total
			FROM unnest($3::uuid[], $4::text[], $5::int[], $6::text[], $7::int[]) AS i(down, policy, k, on_satisfied, total)`,
			part, f.ID, gDowns, gKinds, gK, gOn, gTotal); err != nil {
			return fmt.Errorf("insert edge groups: %w", err)
		}
		f, err = scanFlow(tx.QueryRow(ctx, `UPDATE ff_flow f SET node_count = $3::int, edge_count = $4::int,
				graph_revision = $3::int + $4::int, updated_at = now()
			WHERE partition_key = $1 AND flow_id = $2 RETURNING `+flowColumns, part, f.ID, len(xs), n))
		if err != nil {
			return err
		}
		res = &Submitted{Flow: f, Executions: make(map[string]*store.Execution, len(xs))}
		for i, x := range xs {
			res.Executions[p.Nodes[i].Ref] = x
		}
		return nil
	})
	if err != nil {
		return nil, wrapOp("submit flow "+p.Flow.ID.String(), err)
	}
	return res, nil
}

// cycleRef returns a node on a cycle (Kahn's algorithm leaves exactly the
// nodes on or behind cycles), or "" for a DAG.
func cycleRef(nodes []SubmitNode, indeg []int, out [][]int) string {
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
	if ve, ok := err.(*fault.ValidationError); ok {
		c := *ve
		c.Field = "nodes[" + ref + "]." + c.Field
		return &c
	}
	return err
}
