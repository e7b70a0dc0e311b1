package store

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
)

// NewCompensation is the compensating step of a flow's step (or its
// on-failure step), in the stored params format.
type NewCompensation struct {
	Step   string
	Params json.RawMessage
}

// InsertCompensations records a new flow's compensations.
func InsertCompensations(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, cs []NewCompensation) error {
	steps, params := make([]string, len(cs)), make([]string, len(cs))
	for i, c := range cs {
		steps[i], params[i] = c.Step, string(c.Params)
	}
	_, err := tx.Exec(ctx, `INSERT INTO ff_compensation (partition_key, flow_id, step, params)
		SELECT $1, $2, c.step, c.params FROM unnest($3::text[], $4::jsonb[]) AS c(step, params)`,
		ident.Partition(flowID), flowID, steps, params)
	return wrap("record the compensations of flow "+flowID.String(), err)
}

// FlowCompensations reads a flow's compensations by step.
func FlowCompensations(ctx context.Context, db DB, flowID uuid.UUID) (map[string]json.RawMessage, error) {
	rows, err := db.Query(ctx, `SELECT step, params FROM ff_compensation WHERE partition_key = $1 AND flow_id = $2`,
		ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read the compensations of flow "+flowID.String(), unroutable(db, err))
	}
	out := map[string]json.RawMessage{}
	var step string
	var params []byte
	_, err = pgx.ForEachRow(rows, []any{&step, &params}, func() error {
		out[step] = append(json.RawMessage(nil), params...)
		return nil
	})
	return out, wrap("read the compensations of flow "+flowID.String(), err)
}

// CompensationsDue lists up to limit armed flows that failed or were
// cancelled and have no live member left: their compensations may run.
// Flows that completed are listed too, to be disarmed.
func CompensationsDue(ctx context.Context, db DB, limit int) ([]uuid.UUID, error) {
	rows, err := db.Query(ctx, `SELECT f.flow_id FROM ff_flow f
		WHERE f.compensation = 'armed' AND f.state <> 'open'
			AND NOT EXISTS (SELECT 1 FROM ff_execution x WHERE x.partition_key = f.partition_key AND x.flow_id = f.flow_id
				AND x.state IN ('blocked', 'pending', 'running'))
		LIMIT $1`, limit)
	if err != nil {
		return nil, wrap("find flows to compensate", err)
	}
	ids, err := collectUUIDs(rows)
	return ids, wrap("find flows to compensate", err)
}

// LinksInProgress says whether any sub-flow is in progress or any flow
// is armed with compensations: while none is, the linker has nothing to
// watch completions for.
func LinksInProgress(ctx context.Context, db DB) (bool, error) {
	var any bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ff_subflow WHERE ended_at IS NULL)
		OR EXISTS (SELECT 1 FROM ff_flow WHERE compensation = 'armed')`).Scan(&any)
	return any, wrap("look for sub-flows and compensations in progress", err)
}

// SetCompensation records where a flow's compensations stand (the caller
// holds the flow locked): started with the compensation flow, or not
// needed.
func SetCompensation(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, state string, compensationFlow *uuid.UUID) error {
	tag, err := tx.Exec(ctx, `UPDATE ff_flow SET compensation = $3, compensation_flow_id = $4
		WHERE partition_key = $1 AND flow_id = $2 AND compensation = 'armed'`,
		ident.Partition(flowID), flowID, state, pgUUIDOrNull(compensationFlow))
	if err == nil && tag.RowsAffected() != 1 {
		err = pgx.ErrNoRows
	}
	return wrap("record the compensation of flow "+flowID.String(), err)
}

// ArmCompensation arms a flow that had no compensation when a spawn adds
// its first (the caller holds the flow locked).
func ArmCompensation(ctx context.Context, tx pgx.Tx, flowID uuid.UUID) error {
	_, err := tx.Exec(ctx, `UPDATE ff_flow SET compensation = 'armed' WHERE partition_key = $1 AND flow_id = $2 AND compensation IS NULL`,
		ident.Partition(flowID), flowID)
	return wrap("arm the compensations of flow "+flowID.String(), err)
}

// IsCompensationTaken says err is the refusal of a second compensation
// for one step.
func IsCompensationTaken(err error) bool {
	return refusedBy(err, "23505", "ff_compensation_pkey")
}
