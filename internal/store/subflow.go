package store

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// NewSubflow is a sub-flow step to record beside its execution row.
type NewSubflow struct {
	Step     ffdtype.ExecutionID
	Template json.RawMessage
	// RerunOfChild is the child of the step this one reruns, carried
	// over when the step starts; nil for a fresh step.
	RerunOfChild *uuid.UUID
}

// InsertSubflows records a flow's sub-flow steps (its executions, on its
// partition, written in the same transaction).
func InsertSubflows(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, rows []NewSubflow) error {
	ids, templates, reruns := make([]pgtype.UUID, len(rows)), make([]string, len(rows)), make([]pgtype.UUID, len(rows))
	for i, r := range rows {
		ids[i], templates[i], reruns[i] = pgUUID(r.Step.UUID), string(r.Template), pgUUIDOrNull(r.RerunOfChild)
	}
	_, err := tx.Exec(ctx, `INSERT INTO ff_subflow (partition_key, flow_id, execution_id, template, rerun_of_child)
		SELECT $1, $2, s.id, s.template, s.rerun FROM unnest($3::uuid[], $4::jsonb[], $5::uuid[]) AS s(id, template, rerun)`,
		ident.Partition(flowID), flowID, ids, templates, reruns)
	return wrap("record the sub-flow steps of flow "+flowID.String(), err)
}

// RerunSubflow is a sub-flow step of a rerun and the child of the step
// it reruns: carried over (completed), it keeps that child; else it
// reruns it when it starts.
type RerunSubflow struct {
	Step     ffdtype.ExecutionID
	OldChild uuid.UUID
	Carried  bool
}

// LinkRerunSubflows links a rerun's sub-flow steps (on one partition) to
// their old children, in one statement.
func LinkRerunSubflows(ctx context.Context, tx pgx.Tx, rows []RerunSubflow) error {
	if len(rows) == 0 {
		return nil
	}
	ids, olds, carried := make([]pgtype.UUID, len(rows)), make([]pgtype.UUID, len(rows)), make([]bool, len(rows))
	for i, r := range rows {
		ids[i], olds[i], carried[i] = pgUUID(r.Step.UUID), pgUUID(r.OldChild), r.Carried
	}
	_, err := tx.Exec(ctx, `UPDATE ff_subflow s
		SET child_flow_id = CASE WHEN r.carried THEN r.old ELSE s.child_flow_id END,
			rerun_of_child = CASE WHEN r.carried THEN s.rerun_of_child ELSE r.old END
		FROM unnest($2::uuid[], $3::uuid[], $4::boolean[]) AS r(id, old, carried)
		WHERE s.partition_key = $1 AND s.execution_id = r.id`, rows[0].Step.Partition, ids, olds, carried)
	return wrap("link a rerun's sub-flow steps to their old children", err)
}

// FlowLinks are what a flow records of sub-flows and compensations (its
// version it has from its insert); the zero value records nothing.
type FlowLinks struct {
	Parent       *ffdtype.ExecutionID // the sub-flow step whose body the flow is
	Compensation string               // ffdtype.CompensationArmed, or ""
	Compensates  *uuid.UUID           // on a compensation flow, the flow it compensates
}

// Zero says the links record nothing.
func (l FlowLinks) Zero() bool { return l == FlowLinks{} }

// LinkFlow records a new flow's links (the caller wrote the flow in its
// transaction): one statement, only for a flow that has any.
func LinkFlow(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, l FlowLinks) error {
	var parent pgtype.UUID
	if l.Parent != nil {
		parent = pgUUID(l.Parent.UUID)
	}
	_, err := tx.Exec(ctx, `UPDATE ff_flow SET parent_execution_id = $3, compensation = nullif($4, ''), compensation_of = $5
		WHERE partition_key = $1 AND flow_id = $2`,
		ident.Partition(flowID), flowID, parent, l.Compensation, pgUUIDOrNull(l.Compensates))
	return wrap("link flow "+flowID.String(), err)
}

// Subflow is a sub-flow step as its row records it.
type Subflow struct {
	Step         ffdtype.ExecutionID
	FlowID       uuid.UUID // the parent flow
	Template     json.RawMessage
	RerunOfChild *uuid.UUID
	Child        *uuid.UUID
	StartedAt    *time.Time
	EndedAt      *time.Time
}

const subflowColumns = `s.partition_key, s.execution_id, s.flow_id, s.template, s.rerun_of_child, s.child_flow_id, s.started_at, s.ended_at`

func scanSubflow(row pgx.CollectableRow) (Subflow, error) {
	var s Subflow
	err := row.Scan(&s.Step.Partition, &s.Step.UUID, &s.FlowID, &s.Template, &s.RerunOfChild, &s.Child, &s.StartedAt, &s.EndedAt)
	return s, err
}

// GetSubflow reads a sub-flow step's row, or pgx.ErrNoRows for an
// execution that is not one.
func GetSubflow(ctx context.Context, db DB, step ffdtype.ExecutionID) (Subflow, error) {
	rows, err := db.Query(ctx, `SELECT `+subflowColumns+` FROM ff_subflow s
		WHERE s.partition_key = $1 AND s.execution_id = $2`, step.Partition, step.UUID)
	if err != nil {
		return Subflow{}, wrap("read sub-flow step "+step.String(), err)
	}
	s, err := pgx.CollectExactlyOneRow(rows, scanSubflow)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		err = wrap("read sub-flow step "+step.String(), err)
	}
	return s, err
}

// FlowSubflows reads the sub-flow steps of a flow, by step id.
func FlowSubflows(ctx context.Context, db DB, flowID uuid.UUID) (map[uuid.UUID]Subflow, error) {
	rows, err := db.Query(ctx, `SELECT `+subflowColumns+` FROM ff_subflow s
		WHERE s.partition_key = $1 AND s.flow_id = $2`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read the sub-flow steps of flow "+flowID.String(), unroutable(db, err))
	}
	ss, err := pgx.CollectRows(rows, scanSubflow)
	if err != nil {
		return nil, wrap("read the sub-flow steps of flow "+flowID.String(), err)
	}
	out := make(map[uuid.UUID]Subflow, len(ss))
	for _, s := range ss {
		out[s.Step.UUID] = s
	}
	return out, nil
}

// SubflowsDue lists up to limit sub-flow steps that may start: pending
// and due. Only steps in progress are read (ff_subflow_live).
func SubflowsDue(ctx context.Context, db DB, limit int) ([]ffdtype.ExecutionID, error) {
	rows, err := db.Query(ctx, `SELECT s.partition_key, s.execution_id FROM ff_subflow s
		JOIN ff_execution x ON x.partition_key = s.partition_key AND x.execution_id = s.execution_id
		WHERE s.ended_at IS NULL AND x.state = 'pending' AND x.run_at <= now()
		LIMIT $1`, limit)
	if err != nil {
		return nil, wrap("find sub-flow steps to start", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ffdtype.ExecutionID, error) {
		var id ffdtype.ExecutionID
		return id, r.Scan(&id.Partition, &id.UUID)
	})
}

// SubflowEnd is a sub-flow step whose step or child has ended, not yet
// marked ended.
type SubflowEnd struct {
	Step      ffdtype.ExecutionID
	StepState ffdtype.State
	Epoch     int64
	// Child and ChildState are the step's child and its state; nil and
	// "" for a step that ended before it started one (cancelled while
	// waiting, skipped).
	Child      *uuid.UUID
	ChildState ffdtype.FlowState
}

// SubflowsEnded lists up to limit sub-flow steps not yet marked ended
// whose step or child has ended.
func SubflowsEnded(ctx context.Context, db DB, limit int) ([]SubflowEnd, error) {
	rows, err := db.Query(ctx, `SELECT s.partition_key, s.execution_id, x.state, x.lease_epoch, s.child_flow_id, coalesce(c.state, '')
		FROM ff_subflow s
		JOIN ff_execution x ON x.partition_key = s.partition_key AND x.execution_id = s.execution_id
		LEFT JOIN ff_flow c ON c.partition_key = s.partition_key AND c.flow_id = s.child_flow_id
		WHERE s.ended_at IS NULL
			AND (c.state <> 'open' OR x.state IN ('completed', 'failed', 'cancelled', 'skipped', 'expired'))
		LIMIT $1`, limit)
	if err != nil {
		return nil, wrap("find ended sub-flows", err)
	}
	ends, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SubflowEnd, error) {
		var e SubflowEnd
		return e, r.Scan(&e.Step.Partition, &e.Step.UUID, &e.StepState, &e.Epoch, &e.Child, &e.ChildState)
	})
	return ends, wrap("find ended sub-flows", err)
}

// StartSubflowStep makes a pending sub-flow step running, held by the
// engine with a lease that does not lapse (it runs until Never: the
// daemon ends it with its child; a finite time, which every consumer of
// the outbox can read), and records its child; the caller holds the step locked. It
// returns the step's new epoch, or pgx.ErrNoRows when the step is no
// longer pending. now is the transaction's now(): a distributed Postgres
// refuses now() beside a column in an UPDATE.
func StartSubflowStep(ctx context.Context, tx pgx.Tx, step ffdtype.ExecutionID, child uuid.UUID, now time.Time) (int64, error) {
	var epoch int64
	err := tx.QueryRow(ctx, `UPDATE ff_execution e SET state = 'running', attempt = e.attempt + 1, lease_epoch = e.lease_epoch + 1,
			lease_owner = $3, lease_expires_at = $5::timestamptz, started_at = least(e.started_at, $4::timestamptz),
			attempt_worker = $3, attempt_started_at = $4::timestamptz
		WHERE e.partition_key = $1 AND e.execution_id = $2 AND e.state = 'pending' AND e.run_at <= $4::timestamptz
		RETURNING e.lease_epoch`, step.Partition, step.UUID, SubflowHolder, now, Never).Scan(&epoch)
	if err != nil {
		return 0, err
	}
	_, err = tx.Exec(ctx, `UPDATE ff_subflow SET child_flow_id = $3, started_at = coalesce(started_at, $4::timestamptz)
		WHERE partition_key = $1 AND execution_id = $2`, step.Partition, step.UUID, child, now)
	return epoch, wrap("record the child of sub-flow step "+step.String(), err)
}

// SubflowHolder holds the lease of a running sub-flow step.
const SubflowHolder = "ffd:subflow"

// MarkSubflowEnded records that a sub-flow step and its child have both
// ended: the linker is done with it.
func MarkSubflowEnded(ctx context.Context, tx pgx.Tx, step ffdtype.ExecutionID, now time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE ff_subflow SET ended_at = $3::timestamptz
		WHERE partition_key = $1 AND execution_id = $2 AND ended_at IS NULL`, step.Partition, step.UUID, now)
	return wrap("mark sub-flow step "+step.String()+" ended", err)
}

// FlowResults reads the results of a flow's completed members that no
// edge leaves (its outcome), by step name.
func FlowResults(ctx context.Context, db DB, flowID uuid.UUID) (map[string][]byte, error) {
	rows, err := db.Query(ctx, `SELECT coalesce(x.step, x.execution_id::text), coalesce(x.result, '') FROM ff_execution x
		WHERE x.partition_key = $1 AND x.flow_id = $2 AND x.state = 'completed'
			AND NOT EXISTS (SELECT 1 FROM ff_edge d WHERE d.partition_key = x.partition_key AND d.flow_id = x.flow_id
				AND d.upstream_id = x.execution_id AND d.state <> 'staged')`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read the results of flow "+flowID.String(), unroutable(db, err))
	}
	out := map[string][]byte{}
	var step string
	var result []byte
	_, err = pgx.ForEachRow(rows, []any{&step, &result}, func() error {
		out[step] = append([]byte(nil), result...)
		return nil
	})
	return out, wrap("read the results of flow "+flowID.String(), err)
}
