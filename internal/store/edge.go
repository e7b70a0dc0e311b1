package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// edgeColumns is the select list of an Edge, for a row aliased e.
const edgeColumns = `e.partition_key, e.flow_id, e.edge_id, e.upstream_id, e.downstream_id, e.dependency_kind,
	e.data_passing_ref, e.state, e.resolved_outcome, e.created_at, e.applied_at, e.resolved_at`

// edgeRow is one row of edgeColumns, scanned by name.
type edgeRow struct {
	PartitionKey    int16             `db:"partition_key"`
	FlowID          uuid.UUID         `db:"flow_id"`
	EdgeID          uuid.UUID         `db:"edge_id"`
	UpstreamID      uuid.UUID         `db:"upstream_id"`
	DownstreamID    uuid.UUID         `db:"downstream_id"`
	DependencyKind  string            `db:"dependency_kind"`
	DataPassingRef  *string           `db:"data_passing_ref"`
	State           ffdtype.EdgeState `db:"state"`
	ResolvedOutcome *string           `db:"resolved_outcome"`
	CreatedAt       time.Time         `db:"created_at"`
	AppliedAt       *time.Time        `db:"applied_at"`
	ResolvedAt      *time.Time        `db:"resolved_at"`
}

func scanEdge(row pgx.CollectableRow) (*ffdtype.Edge, error) {
	r, err := pgx.RowToAddrOfStructByName[edgeRow](row)
	if err != nil {
		return nil, err
	}
	return &ffdtype.Edge{
		ID:              r.EdgeID,
		FlowID:          r.FlowID,
		Upstream:        ffdtype.ExecutionID{Partition: r.PartitionKey, UUID: r.UpstreamID},
		Downstream:      ffdtype.ExecutionID{Partition: r.PartitionKey, UUID: r.DownstreamID},
		DependencyKind:  r.DependencyKind,
		DataPassingRef:  deref(r.DataPassingRef),
		State:           r.State,
		ResolvedOutcome: ffdtype.Outcome(deref(r.ResolvedOutcome)),
		CreatedAt:       r.CreatedAt,
		AppliedAt:       r.AppliedAt,
		ResolvedAt:      r.ResolvedAt,
	}, nil
}

func oneEdge(rows pgx.Rows, err error) (*ffdtype.Edge, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanEdge)
}

// GetEdge reads one edge, or returns pgx.ErrNoRows.
func GetEdge(ctx context.Context, db DB, flowID, edgeID uuid.UUID) (*ffdtype.Edge, error) {
	return oneEdge(db.Query(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.edge_id = $3`, ident.Partition(flowID), flowID, edgeID))
}

// FindEdge reads the edge with this id or between these two executions,
// or returns pgx.ErrNoRows: staging either again is a duplicate.
func FindEdge(ctx context.Context, db DB, flowID, edgeID uuid.UUID, up, down ffdtype.ExecutionID) (*ffdtype.Edge, error) {
	return oneEdge(db.Query(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2
			AND (e.edge_id = $3 OR (e.upstream_id = $4 AND e.downstream_id = $5))
		LIMIT 1`, ident.Partition(flowID), flowID, edgeID, up.UUID, down.UUID))
}

// EdgesInto lists the edges into one member of a flow, by edge id.
func EdgesInto(ctx context.Context, db DB, flowID uuid.UUID, down ffdtype.ExecutionID) ([]*ffdtype.Edge, error) {
	return edges(ctx, db, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.downstream_id = $3 ORDER BY e.edge_id`, flowID, down)
}

// EdgesOutOf lists the edges out of one member of a flow, by edge id.
func EdgesOutOf(ctx context.Context, db DB, flowID uuid.UUID, up ffdtype.ExecutionID) ([]*ffdtype.Edge, error) {
	return edges(ctx, db, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.upstream_id = $3 ORDER BY e.edge_id`, flowID, up)
}

// FlowEdges lists every edge of a flow, by edge id.
func FlowEdges(ctx context.Context, db DB, flowID uuid.UUID) ([]*ffdtype.Edge, error) {
	rows, err := db.Query(ctx, `SELECT `+edgeColumns+` FROM ff_edge e
		WHERE e.partition_key = $1 AND e.flow_id = $2 ORDER BY e.edge_id`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("list the edges of flow "+flowID.String(), err)
	}
	es, err := pgx.CollectRows(rows, scanEdge)
	return es, wrap("list the edges of flow "+flowID.String(), err)
}

func edges(ctx context.Context, db DB, sql string, flowID uuid.UUID, node ffdtype.ExecutionID) ([]*ffdtype.Edge, error) {
	rows, err := db.Query(ctx, sql, ident.Partition(flowID), flowID, node.UUID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanEdge)
}

// HasEdgesInto reports whether any edge into the downstream is staged.
func HasEdgesInto(ctx context.Context, db DB, flowID uuid.UUID, down ffdtype.ExecutionID) (bool, error) {
	var staged bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_edge
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3)`,
		ident.Partition(flowID), flowID, down.UUID).Scan(&staged)
	return staged, err
}

// Reaches reports whether `to` is reachable from `from` along the flow's
// edges: an edge to → from would then close a cycle. The caller holds the
// flow locked (StageOnFlow), so no edge commits between this statement's
// snapshot and its own insert.
func Reaches(ctx context.Context, db DB, flowID uuid.UUID, from, to ffdtype.ExecutionID) (bool, error) {
	var found bool
	err := db.QueryRow(ctx, `WITH RECURSIVE reach(id) AS (
			SELECT $3::uuid
			UNION
			SELECT e.downstream_id FROM ff_edge e JOIN reach r ON e.upstream_id = r.id
			WHERE e.partition_key = $1 AND e.flow_id = $2
		)
		SELECT EXISTS (SELECT 1 FROM reach WHERE id = $4)`, ident.Partition(flowID), flowID, from.UUID, to.UUID).Scan(&found)
	return found, err
}

// NewEdge is an edge to insert.
type NewEdge struct {
	ID             uuid.UUID
	Upstream       ffdtype.ExecutionID
	Downstream     ffdtype.ExecutionID
	DependencyKind string
	DataPassingRef string
}

// InsertEdge stages one edge.
func InsertEdge(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, e NewEdge) (*ffdtype.Edge, error) {
	return oneEdge(tx.Query(ctx, `INSERT INTO ff_edge AS e (partition_key, flow_id, edge_id, upstream_id,
			downstream_id, dependency_kind, data_passing_ref)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+edgeColumns,
		ident.Partition(flowID), flowID, e.ID, e.Upstream.UUID, e.Downstream.UUID, e.DependencyKind, nullIfEmpty(e.DataPassingRef)))
}

// InsertAppliedEdges inserts a submitted flow's edges, already applied, in
// one statement.
func InsertAppliedEdges(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, es []NewEdge) error {
	n := len(es)
	ids, ups, downs, kinds, refs := make([]pgtype.UUID, n), make([]pgtype.UUID, n), make([]pgtype.UUID, n), make([]string, n), make([]*string, n)
	for i, e := range es {
		ids[i], ups[i], downs[i], kinds[i], refs[i] = pgUUID(e.ID), pgUUID(e.Upstream.UUID), pgUUID(e.Downstream.UUID), e.DependencyKind, nullIfEmpty(e.DataPassingRef)
	}
	_, err := tx.Exec(ctx, insertAppliedEdgesSQL, ident.Partition(flowID), flowID, ids, ups, downs, kinds, refs)
	return err
}

// ApplyEdge applies a staged edge whose group, edge row and executions the
// caller holds (Locks): the edge becomes applied, its group counts it, and
// a pending downstream becomes blocked, in one statement.
func ApplyEdge(ctx context.Context, tx pgx.Tx, flowID, edgeID uuid.UUID, down ffdtype.ExecutionID) error {
	_, err := tx.Exec(ctx, `WITH e AS (
			UPDATE ff_edge SET state = 'applied', applied_at = now()
			WHERE partition_key = $1 AND flow_id = $2 AND edge_id = $3
		), g AS (
			UPDATE ff_edge_group SET total = total + 1
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $4
		)
		UPDATE ff_execution SET state = 'blocked'
		WHERE partition_key = $1 AND execution_id = $4 AND state = 'pending'`,
		ident.Partition(flowID), flowID, edgeID, down.UUID)
	return err
}

// UpstreamsOf reads the upstreams of down (over its applied and resolved
// edges), by step name, in one query on ff_edge_downstream.
func UpstreamsOf(ctx context.Context, db DB, flowID uuid.UUID, down ffdtype.ExecutionID) ([]ffdtype.Upstream, error) {
	rows, err := db.Query(ctx, upstreamsSQL, down.Partition, flowID, down.UUID)
	if err != nil {
		return nil, wrap("read the upstreams of "+down.String(), err)
	}
	us, err := pgx.CollectRows(rows, scanUpstream)
	return us, wrap("read the upstreams of "+down.String(), err)
}

// FlowMember names one member of a flow.
type FlowMember struct {
	FlowID uuid.UUID
	ID     ffdtype.ExecutionID
}

// UpstreamsOfEach is UpstreamsOf for several members, in one round trip
// (the same statement for each, pipelined), in their order.
func UpstreamsOfEach(ctx context.Context, db DB, members []FlowMember) ([][]ffdtype.Upstream, error) {
	out := make([][]ffdtype.Upstream, len(members))
	if len(members) == 0 {
		return out, nil
	}
	b := &pgx.Batch{}
	for i, m := range members {
		b.Queue(upstreamsSQL, m.ID.Partition, m.FlowID, m.ID.UUID).Query(func(rows pgx.Rows) error {
			var err error
			out[i], err = pgx.CollectRows(rows, scanUpstream)
			return err
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, wrap(fmt.Sprintf("read the upstreams of %d members", len(members)), err)
	}
	return out, nil
}

// upstreamsSQL reads a member's upstreams through its applied and
// resolved edges.
const upstreamsSQL = `SELECT coalesce(u.step, ''), u.partition_key, u.execution_id, u.state, u.result
		FROM ff_edge e JOIN ff_execution u ON u.partition_key = e.partition_key AND u.execution_id = e.upstream_id
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.downstream_id = $3 AND e.state <> 'staged'
		ORDER BY u.step, u.execution_id`

func scanUpstream(r pgx.CollectableRow) (ffdtype.Upstream, error) {
	var u ffdtype.Upstream
	err := r.Scan(&u.Step, &u.ID.Partition, &u.ID.UUID, &u.State, &u.Result)
	return u, err
}

const insertAppliedEdgesSQL = `INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_id, downstream_id,
			dependency_kind, data_passing_ref, state, applied_at)
		SELECT $1, $2, i.edge_id, i.up, i.down, i.kind, i.ref, 'applied', now()
		FROM unnest($3::uuid[], $4::uuid[], $5::uuid[], $6::text[], $7::text[]) AS i(edge_id, up, down, kind, ref)`
