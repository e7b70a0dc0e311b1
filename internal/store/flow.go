package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// flowColumns is the select list of a Flow, for a row aliased f.
const flowColumns = `f.partition_key, f.flow_id, f.namespace, f.kind, f.state, f.graph_revision, f.node_count,
	f.edge_count, f.cancellation_policy, f.cancel_reason, f.cancelled_members, f.tags,
	f.created_at, f.updated_at, f.terminal_at, f.rerun_of, f.parent_execution_id, f.version, f.compensation,
	f.compensation_flow_id, f.compensation_of`

// flowRow is one row of flowColumns, scanned by name.
type flowRow struct {
	PartitionKey       int16             `db:"partition_key"`
	FlowID             uuid.UUID         `db:"flow_id"`
	Namespace          string            `db:"namespace"`
	Kind               string            `db:"kind"`
	State              ffdtype.FlowState `db:"state"`
	GraphRevision      int64             `db:"graph_revision"`
	NodeCount          int               `db:"node_count"`
	EdgeCount          int               `db:"edge_count"`
	CancellationPolicy *string           `db:"cancellation_policy"`
	CancelReason       *string           `db:"cancel_reason"`
	CancelledMembers   []uuid.UUID       `db:"cancelled_members"`
	Tags               map[string]any    `db:"tags"`
	CreatedAt          time.Time         `db:"created_at"`
	UpdatedAt          time.Time         `db:"updated_at"`
	TerminalAt         *time.Time        `db:"terminal_at"`
	RerunOf            *uuid.UUID        `db:"rerun_of"`
	Parent             *uuid.UUID        `db:"parent_execution_id"`
	Version            *string           `db:"version"`
	Compensation       *string           `db:"compensation"`
	CompensationFlow   *uuid.UUID        `db:"compensation_flow_id"`
	CompensationOf     *uuid.UUID        `db:"compensation_of"`
}

func scanFlow(row pgx.CollectableRow) (*ffdtype.Flow, error) {
	r, err := pgx.RowToAddrOfStructByName[flowRow](row)
	if err != nil {
		return nil, err
	}
	var parent *ffdtype.ExecutionID
	if r.Parent != nil {
		// A child lives on its parent's partition.
		parent = &ffdtype.ExecutionID{Partition: r.PartitionKey, UUID: *r.Parent}
	}
	return &ffdtype.Flow{
		Parent:             parent,
		Version:            deref(r.Version),
		Compensation:       deref(r.Compensation),
		CompensationFlow:   r.CompensationFlow,
		CompensationOf:     r.CompensationOf,
		ID:                 r.FlowID,
		Partition:          r.PartitionKey,
		Namespace:          r.Namespace,
		Kind:               r.Kind,
		State:              r.State,
		GraphRevision:      r.GraphRevision,
		NodeCount:          r.NodeCount,
		EdgeCount:          r.EdgeCount,
		CancellationPolicy: ffdtype.CancelPolicy(deref(r.CancellationPolicy)),
		CancelReason:       deref(r.CancelReason),
		CancelledMembers:   idsOn(r.PartitionKey, r.CancelledMembers),
		Tags:               r.Tags,
		CreatedAt:          r.CreatedAt,
		UpdatedAt:          r.UpdatedAt,
		TerminalAt:         r.TerminalAt,
		RerunOf:            r.RerunOf,
	}, nil
}

// oneFlow reads the single row of rows (flowColumns), or pgx.ErrNoRows.
func oneFlow(rows pgx.Rows, err error) (*ffdtype.Flow, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanFlow)
}

// idsOn makes execution ids of uuids on one partition (a flow's members
// share its partition).
func idsOn(part int16, us []uuid.UUID) []ffdtype.ExecutionID {
	out := make([]ffdtype.ExecutionID, len(us))
	for i, u := range us {
		out[i] = ffdtype.ExecutionID{Partition: part, UUID: u}
	}
	return out
}

// NewFlow is a flow to insert.
type NewFlow struct {
	ID        uuid.UUID
	Namespace string
	Kind      string
	Tags      map[string]any
	Version   string // "": none
}

// InsertFlow inserts an open flow on its id's partition, or returns
// pgx.ErrNoRows when a flow with that id exists.
func InsertFlow(ctx context.Context, db DB, f NewFlow) (*ffdtype.Flow, error) {
	return oneFlow(db.Query(ctx, insertFlowSQL, ident.Partition(f.ID), f.ID, f.Namespace, f.Kind, f.Tags, f.Version))
}

const insertFlowSQL = `INSERT INTO ff_flow AS f (partition_key, flow_id, namespace, kind, tags, version)
		VALUES ($1, $2, $3, $4, $5, nullif($6, ''))
		ON CONFLICT (partition_key, flow_id) DO NOTHING
		RETURNING ` + flowColumns

// GetFlow reads a flow without its groups, or returns pgx.ErrNoRows.
func GetFlow(ctx context.Context, db DB, id uuid.UUID) (*ffdtype.Flow, error) {
	return oneFlow(db.Query(ctx, `SELECT `+flowColumns+` FROM ff_flow f
		WHERE f.partition_key = $1 AND f.flow_id = $2`, ident.Partition(id), id))
}

// FlowFilter selects flows for ListFlows; zero fields do not filter.
type FlowFilter struct {
	Namespace string
	State     ffdtype.FlowState
	Kind      string     // "": any; else the kind, or its prefix when it ends in *
	From, To  *time.Time // created at or after From, before To; nil: unbounded
	After     *uuid.UUID // keyset cursor: ids after this one (before it when Newest)
	Limit     int        // rows to return
	Newest    bool       // newest first; false: oldest first
}

// ListFlows reads flows in id (creation) order, or newest first. Each
// order is its own statement so that each reads ff_flow_id in its
// direction and stops at the page.
func ListFlows(ctx context.Context, db DB, f FlowFilter) ([]*ffdtype.Flow, error) {
	const where = `WHERE ($1::text IS NULL OR f.namespace = $1) AND ($2::text IS NULL OR f.state = $2)
			AND ($5::text IS NULL OR f.kind = $5 OR (right($5, 1) = '*' AND f.kind LIKE replace(rtrim($5, '*'), '%', '') || '%'))
			AND ($6::timestamptz IS NULL OR f.created_at >= $6) AND ($7::timestamptz IS NULL OR f.created_at < $7)`
	sql := `SELECT ` + flowColumns + ` FROM ff_flow f ` + where + `
			AND ($3::uuid IS NULL OR f.flow_id > $3)
		ORDER BY f.flow_id LIMIT $4`
	if f.Newest {
		sql = `SELECT ` + flowColumns + ` FROM ff_flow f ` + where + `
			AND ($3::uuid IS NULL OR f.flow_id < $3)
		ORDER BY f.flow_id DESC LIMIT $4`
	}
	rows, err := db.Query(ctx, sql, nullIfEmpty(f.Namespace), nullIfEmpty(string(f.State)), f.After, f.Limit, nullIfEmpty(f.Kind), f.From, f.To)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanFlow)
}

// SetFlowSize records the size of a freshly submitted flow: its node and
// edge counts, and a graph revision that counts both.
func SetFlowSize(ctx context.Context, tx pgx.Tx, id uuid.UUID, nodes, edges int) (*ffdtype.Flow, error) {
	return oneFlow(tx.Query(ctx, setFlowSizeSQL, ident.Partition(id), id, nodes, edges))
}

const setFlowSizeSQL = `UPDATE ff_flow f SET node_count = $3::int, edge_count = $4::int,
			graph_revision = $3::int + $4::int, updated_at = now()
		WHERE partition_key = $1 AND flow_id = $2 RETURNING ` + flowColumns

// StageOnFlow counts a staged edge on its open flow if the flow is still
// at the expected graph revision (compare-and-set), and returns the new
// revision; pgx.ErrNoRows when the flow is missing, not open, or moved on.
// The update locks the flow row: edge staging on one flow serializes here.
func StageOnFlow(ctx context.Context, tx pgx.Tx, id uuid.UUID, expected int64) (revision int64, err error) {
	err = tx.QueryRow(ctx, `UPDATE ff_flow SET graph_revision = graph_revision + 1, edge_count = edge_count + 1,
			updated_at = now()
		WHERE partition_key = $1 AND flow_id = $2 AND graph_revision = $3 AND state = 'open'
		RETURNING graph_revision`, ident.Partition(id), id, expected).Scan(&revision)
	return revision, err
}

// AddMember makes an existing execution a member of a flow and counts it,
// in one statement, and returns the flow's new node count. The caller
// holds both rows locked (Locks.Execution, then Locks.Flow).
func AddMember(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, id ffdtype.ExecutionID) (nodes int, err error) {
	err = tx.QueryRow(ctx, `WITH x AS (
			UPDATE ff_execution SET flow_id = $3 WHERE partition_key = $1 AND execution_id = $2
		)
		UPDATE ff_flow SET node_count = node_count + 1, graph_revision = graph_revision + 1, updated_at = now()
		WHERE partition_key = $1 AND flow_id = $3 RETURNING node_count`, id.Partition, id.UUID, flowID).Scan(&nodes)
	return nodes, err
}

// CountNewMember counts an execution created as a member of the flow.
func CountNewMember(ctx context.Context, tx pgx.Tx, flowID uuid.UUID) error {
	_, err := tx.Exec(ctx, `UPDATE ff_flow SET node_count = node_count + 1, graph_revision = graph_revision + 1,
		updated_at = now() WHERE partition_key = $1 AND flow_id = $2`, ident.Partition(flowID), flowID)
	return err
}

// CancelFlow marks a locked flow cancelled with its policy, reason and the
// members it cancels, and writes the flow's `cancelled` completion event,
// in one statement. Ending the members is the caller's next step
// (Terminate).
func CancelFlow(ctx context.Context, tx pgx.Tx, id uuid.UUID, policy ffdtype.CancelPolicy, reason string, members []uuid.UUID) error {
	// The flow's event is born dispatched: its notice only wakes the
	// outbox's consumers, and rides in the same round trip.
	notices := &Notices{}
	notices.Completions(ident.Partition(id), false)
	b := &pgx.Batch{}
	b.Queue(cancelFlowSQL, ident.Partition(id), id, string(policy), reason, pgUUIDs(members), string(ffdtype.OutcomeCancelled))
	notices.Queue(b)
	return tx.SendBatch(ctx, b).Close()
}

// cancelFlowSQL marks a flow cancelled and writes its completion event.
const cancelFlowSQL = `WITH f AS (
			UPDATE ff_flow SET state = 'cancelled', cancellation_policy = $3, cancel_reason = $4,
				cancelled_members = $5, terminal_at = now(), updated_at = now()
			WHERE partition_key = $1 AND flow_id = $2
			RETURNING partition_key, flow_id, namespace)
		INSERT INTO ff_completion_event (partition_key, flow_id, outcome, namespace, dispatched_at)
		SELECT partition_key, flow_id, $6, namespace, now() FROM f`
