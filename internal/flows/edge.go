package flows

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// DefaultDependencyKind is an edge's kind unless given.
const DefaultDependencyKind = "success_only"

// Edge is one dependency edge.
type Edge struct {
	ID              uuid.UUID
	FlowID          uuid.UUID
	Upstream        ident.ExecutionID
	Downstream      ident.ExecutionID
	DependencyKind  string
	DataPassingRef  string
	State           store.EdgeState
	ResolvedOutcome string
	CreatedAt       time.Time
	AppliedAt       *time.Time
	ResolvedAt      *time.Time
}

const edgeColumns = `e.partition_key, e.flow_id, e.edge_id, e.upstream_id, e.downstream_id, e.dependency_kind,
	coalesce(e.data_passing_ref, ''), e.state, coalesce(e.resolved_outcome, ''), e.created_at, e.applied_at, e.resolved_at`

func scanEdge(row pgx.Row) (*Edge, error) {
	var e Edge
	var part int16
	var state string
	err := row.Scan(&part, &e.FlowID, &e.ID, &e.Upstream.UUID, &e.Downstream.UUID, &e.DependencyKind,
		&e.DataPassingRef, &state, &e.ResolvedOutcome, &e.CreatedAt, &e.AppliedAt, &e.ResolvedAt)
	if err != nil {
		return nil, err
	}
	e.Upstream.Partition, e.Downstream.Partition, e.State = part, part, store.EdgeState(state)
	return &e, nil
}

// StageParams describes an edge to stage.
type StageParams struct {
	FlowID     uuid.UUID
	EdgeID     uuid.UUID // default: a fresh v7 uuid
	Upstream   ident.ExecutionID
	Downstream ident.ExecutionID
	// ExpectedRevision is the flow's graph_revision the caller saw; the
	// stage fails with a stale-revision error when it moved on.
	ExpectedRevision int64
	DependencyKind   string // default DefaultDependencyKind
	DataPassingRef   string
}

// StageResult is a staged edge and the flow's new revision.
type StageResult struct {
	Edge        *Edge
	NewRevision int64
}

// Stage stages a dependency edge (stage_dependency_edge): compare-and-set
// on the flow's graph revision; refuses self edges, executions outside the
// flow, terminal flows, duplicates (a conflict carrying the existing edge)
// and edges that would close a cycle. A refusal writes nothing.
func Stage(ctx context.Context, db store.DB, p StageParams) (*StageResult, error) {
	if p.Upstream == p.Downstream {
		return nil, fault.Invalid(fault.KindInvalidValue, "downstream_id", p.Downstream.String(), "an edge cannot join an execution to itself")
	}
	part := ident.Partition(p.FlowID)
	for field, id := range map[string]ident.ExecutionID{"upstream_id": p.Upstream, "downstream_id": p.Downstream} {
		if id.Partition != part {
			return nil, fault.Invalid(fault.KindNotMember, field, id.String(), "not a member of flow "+p.FlowID.String()+" (another partition)")
		}
	}
	if p.EdgeID == uuid.Nil {
		p.EdgeID = ident.NewUUID()
	}
	if p.DependencyKind == "" {
		p.DependencyKind = DefaultDependencyKind
	}
	if len(p.DependencyKind) > 64 || len(p.DataPassingRef) > 1024 {
		return nil, fault.Invalid(fault.KindTooLarge, "dependency_kind", p.DependencyKind, "dependency_kind at most 64 bytes, data_passing_ref at most 1024")
	}
	var res *StageResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		var rev int64
		err := tx.QueryRow(ctx, `UPDATE ff_flow SET graph_revision = graph_revision + 1, edge_count = edge_count + 1,
				updated_at = now()
			WHERE partition_key = $1 AND flow_id = $2 AND graph_revision = $3 AND state = 'open'
			RETURNING graph_revision`, part, p.FlowID, p.ExpectedRevision).Scan(&rev)
		if errors.Is(err, pgx.ErrNoRows) {
			f, err := Get(ctx, tx, p.FlowID)
			switch {
			case err != nil:
				return err
			case f.State != store.FlowOpen:
				return &fault.AlreadyTerminalError{Object: "flow", ID: p.FlowID.String(), State: string(f.State)}
			default:
				return &fault.StaleRevisionError{FlowID: p.FlowID.String(), Expected: p.ExpectedRevision, Current: f.GraphRevision}
			}
		}
		if err != nil {
			return err
		}
		if err := checkMembers(ctx, tx, p.FlowID, p.Upstream, p.Downstream); err != nil {
			return err
		}
		existing, err := scanEdge(tx.QueryRow(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
			WHERE e.partition_key = $1 AND e.flow_id = $2
				AND (e.edge_id = $3 OR (e.upstream_id = $4 AND e.downstream_id = $5))
			LIMIT 1`, part, p.FlowID, p.EdgeID, p.Upstream.UUID, p.Downstream.UUID))
		if err == nil {
			return &fault.ConflictError{Object: "edge", ID: existing.ID.String(), Reason: "dependency already exists", Existing: existing}
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The flow row is ours since the UPDATE above, and this is a new
		// statement: its snapshot sees every edge committed before us.
		var cycle bool
		err = tx.QueryRow(ctx, `WITH RECURSIVE reach(id) AS (
				SELECT $3::uuid
				UNION
				SELECT e.downstream_id FROM ff_edge e JOIN reach r ON e.upstream_id = r.id
				WHERE e.partition_key = $1 AND e.flow_id = $2
			)
			SELECT EXISTS (SELECT 1 FROM reach WHERE id = $4)`, part, p.FlowID, p.Downstream.UUID, p.Upstream.UUID).Scan(&cycle)
		if err != nil {
			return err
		}
		if cycle {
			return fault.Invalid(fault.KindCycle, "edge", p.Upstream.String()+" -> "+p.Downstream.String(),
				"would close a cycle: the upstream already depends on the downstream")
		}
		edge, err := scanEdge(tx.QueryRow(ctx, `INSERT INTO ff_edge AS e (partition_key, flow_id, edge_id, upstream_id,
				downstream_id, dependency_kind, data_passing_ref)
			VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+edgeColumns,
			part, p.FlowID, p.EdgeID, p.Upstream.UUID, p.Downstream.UUID, p.DependencyKind, nullIfEmpty(p.DataPassingRef)))
		if err != nil {
			return err
		}
		res = &StageResult{Edge: edge, NewRevision: rev}
		return nil
	})
	if err != nil {
		return nil, wrapOp("stage edge "+p.EdgeID.String(), err)
	}
	return res, nil
}

func checkMembers(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, ids ...ident.ExecutionID) error {
	for _, id := range ids {
		var member *uuid.UUID
		err := tx.QueryRow(ctx, `SELECT flow_id FROM ff_execution WHERE partition_key = $1 AND execution_id = $2`,
			id.Partition, id.UUID).Scan(&member)
		if errors.Is(err, pgx.ErrNoRows) {
			return &fault.NotFoundError{Object: "execution", ID: id.String()}
		}
		if err != nil {
			return err
		}
		if member == nil || *member != flowID {
			return fault.Invalid(fault.KindNotMember, "execution_id", id.String(), "not a member of flow "+flowID.String())
		}
	}
	return nil
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// ApplyResult is what Apply did.
type ApplyResult struct {
	AlreadyApplied bool
	// Unsatisfied is how many more upstream successes the downstream's
	// group needs.
	Unsatisfied int
	// Resolved is true when the upstream had already finished, so the edge
	// resolved at once.
	Resolved bool
	Group    EdgeGroup
}

// Apply applies a staged edge to its downstream
// (apply_dependency_to_child): the edge counts into the downstream's group
// (all_of unless a policy was set) and a pending downstream becomes
// blocked. If the upstream has already finished, the edge resolves at once
// from its outcome. Idempotent. Refused for a running or terminal
// downstream, a decided group, or a flow that is not open.
func Apply(ctx context.Context, db store.DB, flowID, edgeID uuid.UUID) (*ApplyResult, error) {
	part := ident.Partition(flowID)
	var res *ApplyResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		edge, err := DescribeEdge(ctx, tx, flowID, edgeID)
		if err != nil {
			return err
		}
		// Lock order: group, edge, executions, flow.
		if _, err := tx.Exec(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id)
			VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, part, flowID, edge.Downstream.UUID); err != nil {
			return err
		}
		group, err := scanGroup(tx.QueryRow(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
			WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = $3 FOR NO KEY UPDATE`, part, flowID, edge.Downstream.UUID))
		if err != nil {
			return err
		}
		var state string
		if err := tx.QueryRow(ctx, `SELECT state FROM ff_edge WHERE partition_key = $1 AND flow_id = $2 AND edge_id = $3 FOR NO KEY UPDATE`,
			part, flowID, edgeID).Scan(&state); err != nil {
			return err
		}
		if state != string(store.EdgeStaged) {
			res = &ApplyResult{AlreadyApplied: true, Unsatisfied: group.Unsatisfied(), Group: *group}
			return nil
		}
		if group.Decision != store.Pending {
			return &fault.ConflictError{Object: "edge group", ID: edge.Downstream.String(), Reason: "the group has already decided (" + string(group.Decision) + ")", Existing: *group}
		}
		// Executions in id order. The upstream's state is read under its row
		// lock, so its terminal transition either committed before (and we
		// resolve here) or waits for us (and its cascade sees the applied
		// edge).
		rows, err := tx.Query(ctx, `SELECT execution_id, state FROM ff_execution
			WHERE partition_key = $1 AND execution_id = ANY($2) ORDER BY execution_id FOR NO KEY UPDATE`,
			part, []uuid.UUID{edge.Upstream.UUID, edge.Downstream.UUID})
		if err != nil {
			return err
		}
		states := map[uuid.UUID]store.State{}
		for rows.Next() {
			var id uuid.UUID
			var s string
			if err := rows.Scan(&id, &s); err != nil {
				rows.Close()
				return err
			}
			states[id] = store.State(s)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		down := states[edge.Downstream.UUID]
		switch {
		case down.Terminal():
			return &fault.AlreadyTerminalError{Object: "execution", ID: edge.Downstream.String(), State: string(down)}
		case down == store.StateRunning:
			return &fault.ConflictError{Object: "execution", ID: edge.Downstream.String(), Reason: "the downstream is already running; apply edges before it can be claimed"}
		}
		if _, err := openFlowForShare(ctx, tx, flowID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_edge SET state = 'applied', applied_at = now()
			WHERE partition_key = $1 AND flow_id = $2 AND edge_id = $3`, part, flowID, edgeID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_edge_group SET total = total + 1
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`, part, flowID, edge.Downstream.UUID); err != nil {
			return err
		}
		if down == store.StatePending {
			if _, err := tx.Exec(ctx, `UPDATE ff_execution SET state = 'blocked'
				WHERE partition_key = $1 AND execution_id = $2 AND state = 'pending'`, part, edge.Downstream.UUID); err != nil {
				return err
			}
		}
		res = &ApplyResult{}
		if up := states[edge.Upstream.UUID]; up.Terminal() {
			if _, err := Resolve(ctx, tx, []Resolution{{Upstream: edge.Upstream, Outcome: OutcomeOf(up), EdgeID: &edgeID}}); err != nil {
				return err
			}
			res.Resolved = true
		}
		group, err = scanGroup(tx.QueryRow(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
			WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = $3`, part, flowID, edge.Downstream.UUID))
		if err != nil {
			return err
		}
		res.Group, res.Unsatisfied = *group, group.Unsatisfied()
		return nil
	})
	if err != nil {
		return nil, wrapOp("apply edge "+edgeID.String(), err)
	}
	return res, nil
}

// OutcomeOf is the completion outcome of a terminal execution state.
func OutcomeOf(s store.State) string {
	if s == store.StateCompleted {
		return "success"
	}
	return string(s)
}

// SetPolicy sets the join policy of a downstream (set_edge_group_policy).
// Allowed only before the first edge into that downstream is staged;
// restating the policy it has is a no-op success (alreadySet).
func SetPolicy(ctx context.Context, db store.DB, flowID uuid.UUID, downstream ident.ExecutionID, p Policy) (alreadySet bool, err error) {
	if err := p.Normalize(); err != nil {
		return false, err
	}
	part := ident.Partition(flowID)
	if downstream.Partition != part {
		return false, fault.Invalid(fault.KindNotMember, "downstream_id", downstream.String(), "not a member of flow "+flowID.String()+" (another partition)")
	}
	var k *int
	var onSat *string
	if p.Kind == store.Quorum {
		k = &p.K
	}
	if p.Kind != store.AllOf {
		s := string(p.OnSatisfied)
		onSat = &s
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
		// Then the locks in the global order: the group, then the flow.
		// The group row is created with the new policy when it is missing
		// (a refusal below rolls it back) and locked when it exists.
		var inserted bool
		err := tx.QueryRow(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, policy, k, on_satisfied)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (partition_key, flow_id, downstream_id) DO NOTHING
			RETURNING true`, part, flowID, downstream.UUID, string(p.Kind), k, onSat).Scan(&inserted)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		var existing *EdgeGroup
		if !inserted {
			existing, err = scanGroup(tx.QueryRow(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
				WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = $3 FOR NO KEY UPDATE`, part, flowID, downstream.UUID))
			if err != nil {
				return err
			}
		}
		// Share-lock the flow: staging an edge updates it, so no edge can
		// be staged between the check below (a statement of its own, whose
		// snapshot sees every staging that committed before the lock) and
		// our commit.
		if _, err := openFlowForShare(ctx, tx, flowID); err != nil {
			return err
		}
		if existing != nil && existing.Policy == p {
			alreadySet = true
			return nil
		}
		var staged bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_edge
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3)`, part, flowID, downstream.UUID).Scan(&staged); err != nil {
			return err
		}
		if staged {
			return &fault.ConflictError{Object: "edge group", ID: downstream.String(),
				Reason: "its policy is fixed: edges into it are already staged", Existing: existing}
		}
		if inserted {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE ff_edge_group SET policy = $4, k = $5, on_satisfied = $6
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`,
			part, flowID, downstream.UUID, string(p.Kind), k, onSat)
		return err
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
func ListEdges(ctx context.Context, db store.DB, flowID uuid.UUID, node ident.ExecutionID, dir Direction) ([]*Edge, error) {
	col := "upstream_id"
	switch dir {
	case Outgoing:
	case Incoming:
		col = "downstream_id"
	default:
		return nil, fault.Invalid(fault.KindInvalidValue, "direction", string(dir), "want incoming or outgoing")
	}
	rows, err := db.Query(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.`+col+` = $3 ORDER BY e.edge_id`,
		ident.Partition(flowID), flowID, node.UUID)
	if err != nil {
		return nil, fmt.Errorf("list edges of %s: %w", node, err)
	}
	edges, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Edge, error) { return scanEdge(r) })
	if err != nil {
		return nil, fmt.Errorf("list edges of %s: %w", node, err)
	}
	return edges, nil
}

// DescribeEdge reads one edge.
func DescribeEdge(ctx context.Context, db store.DB, flowID, edgeID uuid.UUID) (*Edge, error) {
	e, err := scanEdge(db.QueryRow(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.edge_id = $3`, ident.Partition(flowID), flowID, edgeID))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &fault.NotFoundError{Object: "edge", ID: edgeID.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("read edge %s: %w", edgeID, err)
	}
	return e, nil
}
