package store

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// IsRerunTaken reports a second rerun of the same flow or execution
// (ff_flow_rerun, ff_execution_rerun).
func IsRerunTaken(err error) bool {
	return refusedBy(err, "23505", "ff_flow_rerun", "ff_execution_rerun")
}

// FindRerun returns the flow that reruns flow id (on id's partition), or
// pgx.ErrNoRows.
func FindRerun(ctx context.Context, db DB, id uuid.UUID) (*ffdtype.Flow, error) {
	return oneFlow(db.Query(ctx, `SELECT `+flowColumns+` FROM ff_flow f WHERE f.partition_key = $2 AND f.rerun_of = $1`, id, ident.Partition(id)))
}

// LinkFlowRerun records that flow id reruns flow of.
func LinkFlowRerun(ctx context.Context, tx pgx.Tx, id, of uuid.UUID) error {
	_, err := tx.Exec(ctx, `UPDATE ff_flow SET rerun_of = $3 WHERE partition_key = $1 AND flow_id = $2`, ident.Partition(id), id, of)
	return err
}

// FlowMembers reads every member of a flow, by id.
func FlowMembers(ctx context.Context, db DB, flowID uuid.UUID) ([]*ffdtype.Execution, error) {
	rows, err := db.Query(ctx, `SELECT `+execColumns+` FROM ff_execution e
		WHERE e.partition_key = $1 AND e.flow_id = $2 ORDER BY e.execution_id`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read the members of flow "+flowID.String(), err)
	}
	xs, err := collectExecutions(rows)
	return xs, wrap("read the members of flow "+flowID.String(), err)
}

// Carried pairs an execution of a rerun with the one it reruns.
type Carried struct {
	New, Old ffdtype.ExecutionID
}

// LinkRerunMembers records, for each pair, that New reruns Old.
func LinkRerunMembers(ctx context.Context, tx pgx.Tx, pairs []Carried) error {
	np, nid, _, oid := carriedArrays(pairs)
	_, err := tx.Exec(ctx, `UPDATE ff_execution e SET rerun_of = i.oid
		FROM unnest($1::smallint[], $2::uuid[], $3::uuid[]) AS i(np, nid, oid)
		WHERE e.partition_key = i.np AND e.execution_id = i.nid`, np, nid, oid)
	return err
}

// carrySQL ends each new execution completed with its original's result,
// without running it, and writes its completion event. The event is left
// to the cascade like any other, so the rerun's edges and groups resolve
// the way they always do.
const carrySQL = `
WITH i AS (SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::smallint[], $4::uuid[]) AS i(np, nid, op, oid)),
carried AS (
	UPDATE ff_execution e SET state = 'completed', result = o.result, terminal_at = now()
	FROM i JOIN ff_execution o ON o.partition_key = i.op AND o.execution_id = i.oid AND o.state = 'completed'
	WHERE e.partition_key = i.np AND e.execution_id = i.nid AND e.state IN ('blocked', 'pending')
	RETURNING e.partition_key, e.execution_id, e.flow_id, e.namespace, e.step)
INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, attempt, namespace, step)
SELECT partition_key, execution_id, flow_id, 'success', 0, namespace, step FROM carried`

// CarryCompleted completes the new executions with their originals'
// results (the originals must be completed).
func CarryCompleted(ctx context.Context, tx pgx.Tx, pairs []Carried) error {
	np, nid, op, oid := carriedArrays(pairs)
	notices := &Notices{}
	for _, p := range pairs {
		notices.Completions(p.New.Partition, true) // members: the cascade's
	}
	b := &pgx.Batch{}
	var tag pgconn.CommandTag
	b.Queue(carrySQL, np, nid, op, oid).Exec(func(t pgconn.CommandTag) error {
		tag = t
		return nil
	})
	notices.Queue(b)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != int64(len(pairs)) {
		return fmt.Errorf("carried %d of %d completed steps", n, len(pairs))
	}
	return nil
}

func carriedArrays(pairs []Carried) (np []int16, nid []pgtype.UUID, op []int16, oid []pgtype.UUID) {
	for _, p := range pairs {
		np, nid = append(np, p.New.Partition), append(nid, pgUUID(p.New.UUID))
		op, oid = append(op, p.Old.Partition), append(oid, pgUUID(p.Old.UUID))
	}
	return np, nid, op, oid
}
