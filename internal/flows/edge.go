package flows

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// DefaultDependencyKind is an edge's kind unless given.
const DefaultDependencyKind = "success_only"

// Stage stages a dependency edge (stage_dependency_edge): compare-and-set
// on the flow's graph revision; refuses self edges, executions outside the
// flow, terminal flows, duplicates (a conflict carrying the existing edge)
// and edges that would close a cycle. A refusal writes nothing.
func Stage(ctx context.Context, db store.DB, p ffdtype.StageEdgeParams) (*ffdtype.StageResult, error) {
	if p.Upstream == p.Downstream {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "downstream_id", p.Downstream.String(), "an edge cannot join an execution to itself")
	}
	part := ident.Partition(p.FlowID)
	for field, id := range map[string]ffdtype.ExecutionID{"upstream_id": p.Upstream, "downstream_id": p.Downstream} {
		if id.Partition != part {
			return nil, fault.Invalid(ffdtype.KindNotMember, field, id.String(), "not a member of flow "+p.FlowID.String()+" (another partition)")
		}
	}
	if p.EdgeID == uuid.Nil {
		p.EdgeID = ident.NewUUID()
	}
	if p.DependencyKind == "" {
		p.DependencyKind = DefaultDependencyKind
	}
	if len(p.DependencyKind) > 64 || len(p.DataPassingRef) > 1024 {
		return nil, fault.Invalid(ffdtype.KindTooLarge, "dependency_kind", p.DependencyKind, "dependency_kind at most 64 bytes, data_passing_ref at most 1024")
	}
	var res *ffdtype.StageResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		rev, err := stageOnFlow(ctx, tx, p.FlowID, p.ExpectedRevision)
		if err != nil {
			return err
		}
		if err := checkMembers(ctx, tx, p.FlowID, p.Upstream, p.Downstream); err != nil {
			return err
		}
		existing, err := store.FindEdge(ctx, tx, p.FlowID, p.EdgeID, p.Upstream, p.Downstream)
		if err == nil {
			return &ffdtype.ConflictError{Object: "edge", ID: existing.ID.String(), Reason: "dependency already exists", Existing: existing}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The flow row is ours since stageOnFlow, and this is a new
		// statement: its snapshot sees every edge committed before us.
		cycle, err := store.Reaches(ctx, tx, p.FlowID, p.Downstream, p.Upstream)
		if err != nil {
			return err
		}
		if cycle {
			return fault.Invalid(ffdtype.KindCycle, "edge", p.Upstream.String()+" -> "+p.Downstream.String(),
				"would close a cycle: the upstream already depends on the downstream")
		}
		edge, err := store.InsertEdge(ctx, tx, p.FlowID, store.NewEdge{ID: p.EdgeID, Upstream: p.Upstream, Downstream: p.Downstream,
			DependencyKind: p.DependencyKind, DataPassingRef: p.DataPassingRef})
		if err != nil {
			return err
		}
		res = &ffdtype.StageResult{Edge: edge, NewRevision: rev}
		return nil
	})
	if err != nil {
		return nil, wrapOp("stage edge "+p.EdgeID.String(), err)
	}
	return res, nil
}

// stageOnFlow counts the edge on its flow (store.StageOnFlow) and says
// why it cannot when the flow is missing, finished or at another revision.
func stageOnFlow(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, expected int64) (int64, error) {
	rev, err := store.StageOnFlow(ctx, tx, flowID, expected)
	if !errors.Is(err, pgx.ErrNoRows) {
		return rev, err
	}
	f, err := Get(ctx, tx, flowID)
	switch {
	case err != nil:
		return 0, err
	case f.State != ffdtype.FlowOpen:
		return 0, &ffdtype.AlreadyTerminalError{Object: "flow", ID: flowID.String(), State: string(f.State)}
	default:
		return 0, &ffdtype.StaleRevisionError{FlowID: flowID.String(), Expected: expected, Current: f.GraphRevision}
	}
}

func checkMembers(ctx context.Context, db store.DB, flowID uuid.UUID, ids ...ffdtype.ExecutionID) error {
	for _, id := range ids {
		member, err := store.ExecutionFlow(ctx, db, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
		}
		if err != nil {
			return err
		}
		if member == nil || *member != flowID {
			return fault.Invalid(ffdtype.KindNotMember, "execution_id", id.String(), "not a member of flow "+flowID.String())
		}
	}
	return nil
}

// Apply applies a staged edge to its downstream
// (apply_dependency_to_child): the edge counts into the downstream's group
// (all_of unless a policy was set) and a pending downstream becomes
// blocked. If the upstream has already finished, the edge resolves at once
// from its outcome. Idempotent. Refused for a running or terminal
// downstream, a decided group, or a flow that is not open.
func Apply(ctx context.Context, db store.DB, flowID, edgeID uuid.UUID) (*ffdtype.ApplyResult, error) {
	var res *ffdtype.ApplyResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		edge, err := DescribeEdge(ctx, tx, flowID, edgeID)
		if err != nil {
			return err
		}
		locks := store.NewLocks(tx)
		group, _, err := locks.Group(ctx, flowID, edge.Downstream, &ffdtype.Policy{Kind: ffdtype.AllOf})
		if err != nil {
			return err
		}
		state, err := locks.Edge(ctx, flowID, edgeID)
		if err != nil {
			return err
		}
		if state != ffdtype.EdgeStaged {
			res = &ffdtype.ApplyResult{AlreadyApplied: true, Unsatisfied: group.Unsatisfied(), Group: *group}
			return nil
		}
		if group.Decision != ffdtype.DecisionPending {
			return &ffdtype.ConflictError{Object: "edge group", ID: edge.Downstream.String(), Reason: "the group has already decided (" + string(group.Decision) + ")", Existing: *group}
		}
		// The upstream's state is read under its row lock, so its terminal
		// transition either committed before (and we resolve here) or waits
		// for us (and its cascade sees the applied edge).
		states, err := locks.Executions(ctx, edge.Upstream.Partition, edge.Upstream.UUID, edge.Downstream.UUID)
		if err != nil {
			return err
		}
		if err := applicable(edge.Downstream, states[edge.Downstream.UUID]); err != nil {
			return err
		}
		if _, err := lockOpenFlow(ctx, locks, flowID, store.ForShare); err != nil {
			return err
		}
		res, err = applyEdge(ctx, tx, edge, states[edge.Upstream.UUID])
		return err
	})
	if err != nil {
		return nil, wrapOp("apply edge "+edgeID.String(), err)
	}
	return res, nil
}

// applicable refuses an edge into a downstream that is running or done.
func applicable(down ffdtype.ExecutionID, s ffdtype.State) error {
	switch {
	case s.Terminal():
		return &ffdtype.AlreadyTerminalError{Object: "execution", ID: down.String(), State: string(s)}
	case s == ffdtype.StateRunning:
		return &ffdtype.ConflictError{Object: "execution", ID: down.String(), Reason: "the downstream is already running; apply edges before it can be claimed"}
	}
	return nil
}

// applyEdge applies a staged edge whose rows the caller holds, resolves it
// at once when its upstream has already finished, and reports the group.
func applyEdge(ctx context.Context, tx pgx.Tx, edge *ffdtype.Edge, up ffdtype.State) (*ffdtype.ApplyResult, error) {
	if err := store.ApplyEdge(ctx, tx, edge.FlowID, edge.ID, edge.Downstream); err != nil {
		return nil, err
	}
	res := &ffdtype.ApplyResult{}
	if up.Terminal() {
		r := store.Resolution{Upstream: edge.Upstream, Outcome: ffdtype.OutcomeOf(up), EdgeID: &edge.ID}
		// Not relaxed: the caller's transaction may hold anything.
		if _, err := Resolve(ctx, tx, []store.Resolution{r}, false); err != nil {
			return nil, err
		}
		res.Resolved = true
	}
	group, err := store.GetGroup(ctx, tx, edge.FlowID, edge.Downstream)
	if err != nil {
		return nil, err
	}
	res.Group, res.Unsatisfied = *group, group.Unsatisfied()
	return res, nil
}

// SetPolicy sets the join policy of a downstream (set_edge_group_policy).
// Allowed only before the first edge into that downstream is staged;
// restating the policy it has is a no-op success (alreadySet).
func SetPolicy(ctx context.Context, db store.DB, flowID uuid.UUID, downstream ffdtype.ExecutionID, p ffdtype.Policy) (alreadySet bool, err error) {
	if err := NormalizePolicy(&p); err != nil {
		return false, err
	}
	if part := ident.Partition(flowID); downstream.Partition != part {
		return false, fault.Invalid(ffdtype.KindNotMember, "downstream_id", downstream.String(), "not a member of flow "+flowID.String()+" (another partition)")
	}
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		// Unlocked checks first, so that a missing flow or a non-member is
		// reported as such rather than as a foreign-key violation.
		if _, err := Get(ctx, tx, flowID); err != nil {
			return err
		}
		if err := checkMembers(ctx, tx, flowID, downstream); err != nil {
			return err
		}
		// Then the locks in the global order: the group, created with the
		// new policy when it is missing (a refusal below rolls it back),
		// then the flow, share-locked: staging an edge updates it, so no
		// edge can be staged between the check below (a statement of its
		// own, whose snapshot sees every staging that committed before the
		// lock) and our commit.
		locks := store.NewLocks(tx)
		existing, created, err := locks.Group(ctx, flowID, downstream, &p)
		if err != nil {
			return err
		}
		if _, err := lockOpenFlow(ctx, locks, flowID, store.ForShare); err != nil {
			return err
		}
		if !created && existing.Policy == p {
			alreadySet = true
			return nil
		}
		staged, err := store.HasEdgesInto(ctx, tx, flowID, downstream)
		if err != nil {
			return err
		}
		if staged {
			var prev any
			if !created {
				prev = existing
			}
			return &ffdtype.ConflictError{Object: "edge group", ID: downstream.String(),
				Reason: "its policy is fixed: edges into it are already staged", Existing: prev}
		}
		if created {
			return nil
		}
		return store.SetGroupPolicy(ctx, tx, flowID, downstream, p)
	})
	if err != nil {
		return false, wrapOp("set edge group policy of "+downstream.String(), err)
	}
	return alreadySet, nil
}

// Direction selects incoming or outgoing edges.
type Direction string

// Directions.
const (
	Incoming Direction = "incoming"
	Outgoing Direction = "outgoing"
)

// ListEdges lists the edges into (Incoming) or out of (Outgoing) one
// member, by edge id.
func ListEdges(ctx context.Context, db store.DB, flowID uuid.UUID, node ffdtype.ExecutionID, dir Direction) ([]*ffdtype.Edge, error) {
	var edges []*ffdtype.Edge
	var err error
	switch dir {
	case Outgoing:
		edges, err = store.EdgesOutOf(ctx, db, flowID, node)
	case Incoming:
		edges, err = store.EdgesInto(ctx, db, flowID, node)
	default:
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "direction", string(dir), "want incoming or outgoing")
	}
	if err != nil {
		return nil, fmt.Errorf("list edges of %s: %w", node, err)
	}
	return edges, nil
}

// DescribeEdge reads one edge.
func DescribeEdge(ctx context.Context, db store.DB, flowID, edgeID uuid.UUID) (*ffdtype.Edge, error) {
	e, err := store.GetEdge(ctx, db, flowID, edgeID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "edge", ID: edgeID.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("read edge %s: %w", edgeID, err)
	}
	return e, nil
}
