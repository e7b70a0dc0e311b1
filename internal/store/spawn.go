package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// StepMember is a flow member found by its step name.
type StepMember struct {
	Step  string
	ID    ffdtype.ExecutionID
	State ffdtype.State
}

// MembersByStep reads the members of a flow with the given step names
// (through the flow's step index); names no member has are left out.
func MembersByStep(ctx context.Context, db DB, flowID uuid.UUID, steps []string) (map[string]StepMember, error) {
	part := ident.Partition(flowID)
	rows, err := db.Query(ctx, `SELECT step, execution_id, state FROM ff_execution
		WHERE partition_key = $1 AND flow_id = $2 AND step = ANY($3::text[])`, part, flowID, steps)
	if err != nil {
		return nil, wrap("read steps of flow "+flowID.String(), unroutable(db, err))
	}
	ms, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StepMember, error) {
		m := StepMember{ID: ffdtype.ExecutionID{Partition: part}}
		return m, r.Scan(&m.Step, &m.ID.UUID, &m.State)
	})
	if err != nil {
		return nil, wrap("read steps of flow "+flowID.String(), err)
	}
	out := make(map[string]StepMember, len(ms))
	for _, m := range ms {
		out[m.Step] = m
	}
	return out, nil
}

// WidenGroups counts edges added into existing edge groups (the caller
// holds them locked): each group's total grows by its count.
func WidenGroups(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, downs []uuid.UUID, adds []int32) error {
	tag, err := tx.Exec(ctx, `UPDATE ff_edge_group g SET total = g.total + i.n
		FROM unnest($3::uuid[], $4::int[]) AS i(downstream_id, n)
		WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = i.downstream_id`,
		ident.Partition(flowID), flowID, pgUUIDs(downs), adds)
	if err != nil {
		return wrap("widen edge groups of flow "+flowID.String(), err)
	}
	if int(tag.RowsAffected()) != len(downs) {
		return wrap("widen edge groups of flow "+flowID.String(), pgx.ErrNoRows)
	}
	return nil
}

// GrowFlow counts members and edges added to a flow (the caller holds
// it locked); each counts one graph revision, as staging does.
func GrowFlow(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, nodes, edges int) error {
	_, err := tx.Exec(ctx, `UPDATE ff_flow SET node_count = node_count + $3::int, edge_count = edge_count + $4::int,
			graph_revision = graph_revision + $3::int + $4::int, updated_at = now()
		WHERE partition_key = $1 AND flow_id = $2`, ident.Partition(flowID), flowID, nodes, edges)
	return wrap("count the steps added to flow "+flowID.String(), err)
}

// MarkSpawned records that spawner added the new members ids to its
// flow (the console draws them so).
func MarkSpawned(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, spawner ffdtype.ExecutionID, ids []ffdtype.ExecutionID) error {
	us := make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		us[i] = pgUUID(id.UUID)
	}
	_, err := tx.Exec(ctx, `INSERT INTO ff_spawned (partition_key, flow_id, execution_id, spawned_by)
		SELECT $1, $2, x, $4 FROM unnest($3::uuid[]) AS x`, spawner.Partition, flowID, us, pgUUID(spawner.UUID))
	return wrap("record the steps "+spawner.String()+" spawned", err)
}

// MemberNote is what the console shows of a flow member beyond its
// row's state: the step that spawned it, and its wait.
type MemberNote struct {
	SpawnedBy *uuid.UUID
	WaitFor   string // "sleep", "signal"; "" for none
	Signal    string
	Until     *time.Time
	Waiting   bool       // the wait lasts now
	Child     *uuid.UUID // a sub-flow step's child, once started
}

// FlowMemberNotes reads the notes of a flow's members that have any: the
// spawned ones, and those that waited.
func FlowMemberNotes(ctx context.Context, db DB, flowID uuid.UUID) (map[uuid.UUID]MemberNote, error) {
	rows, err := db.Query(ctx, `SELECT x.execution_id, sp.spawned_by, coalesce(w.wait_for, ''), coalesce(w.wait_signal, ''), w.wait_until,
			coalesce(x.state = 'pending' AND w.wait_attempt = x.attempt AND w.woken_by IS NULL AND x.run_at > now(), false), sf.child_flow_id
		FROM ff_execution x
		LEFT JOIN ff_wait w ON w.partition_key = x.partition_key AND w.execution_id = x.execution_id
		LEFT JOIN ff_spawned sp ON sp.partition_key = x.partition_key AND sp.flow_id = x.flow_id AND sp.execution_id = x.execution_id
		LEFT JOIN ff_subflow sf ON sf.partition_key = x.partition_key AND sf.flow_id = x.flow_id AND sf.execution_id = x.execution_id
		WHERE x.partition_key = $1 AND x.flow_id = $2
			AND (w.execution_id IS NOT NULL OR sp.execution_id IS NOT NULL OR sf.child_flow_id IS NOT NULL)`,
		ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read notes of flow "+flowID.String(), unroutable(db, err))
	}
	out := map[uuid.UUID]MemberNote{}
	var id uuid.UUID
	var by, child pgtype.UUID
	var n MemberNote
	_, err = pgx.ForEachRow(rows, []any{&id, &by, &n.WaitFor, &n.Signal, &n.Until, &n.Waiting, &child}, func() error {
		note := n
		if child.Valid {
			c := uuid.UUID(child.Bytes)
			note.Child = &c
		}
		if by.Valid {
			u := uuid.UUID(by.Bytes)
			note.SpawnedBy = &u
		}
		out[id] = note
		return nil
	})
	return out, wrap("read notes of flow "+flowID.String(), err)
}
