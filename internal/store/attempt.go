package store

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// ListAttempts reads an execution's attempts, first first: the rows of
// ff_attempt_all, each one claim of the execution and how it ended (an
// ff_attempt row, or the attempt held on the execution row).
func ListAttempts(ctx context.Context, db DB, id ffdtype.ExecutionID) ([]ffdtype.Attempt, error) {
	rows, err := db.Query(ctx, `SELECT attempt, lease_epoch, worker, started_at, ended_at, coalesce(outcome, ''), coalesce(error, '')
		FROM ff_attempt_all WHERE partition_key = $1 AND execution_id = $2 ORDER BY attempt`, id.Partition, id.UUID)
	if err != nil {
		return nil, wrap("list attempts of "+id.String(), err)
	}
	as, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (a ffdtype.Attempt, err error) {
		err = row.Scan(&a.Attempt, &a.LeaseEpoch, &a.Worker, &a.StartedAt, &a.EndedAt, &a.Outcome, &a.Error)
		return a, err
	})
	return as, wrap("list attempts of "+id.String(), err)
}

// LeaseOutcome is how one lease of an execution ended: the attempt run
// under it and the execution's state now.
type LeaseOutcome struct {
	Lease LeaseRef
	State ffdtype.State
	// Outcome is the attempt's under the lease; "" while it is open, or
	// when no attempt ran under that epoch.
	Outcome ffdtype.AttemptOutcome
}

// LeaseOutcomes reads how each of the given leases ended: what the fault
// suite checks a handler's success against (a success whose attempt did
// not end succeeded was dropped, unless its execution was cancelled).
func LeaseOutcomes(ctx context.Context, db DB, leases []LeaseRef) ([]LeaseOutcome, error) {
	parts, ids, epochs := make([]int16, len(leases)), make([]pgtype.UUID, len(leases)), make([]int64, len(leases))
	for i, l := range leases {
		parts[i], ids[i], epochs[i] = l.ID.Partition, pgUUID(l.ID.UUID), l.Epoch
	}
	rows, err := db.Query(ctx, `
		SELECT i.partition_key, i.execution_id, i.lease_epoch, e.state, coalesce(a.outcome, '')
		FROM unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(partition_key, execution_id, lease_epoch)
		JOIN ff_execution e ON e.partition_key = i.partition_key AND e.execution_id = i.execution_id
		LEFT JOIN ff_attempt_all a ON a.partition_key = i.partition_key AND a.execution_id = i.execution_id
			AND a.lease_epoch = i.lease_epoch`, parts, ids, epochs)
	if err != nil {
		return nil, wrap("read how leases ended", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LeaseOutcome, error) {
		var o LeaseOutcome
		err := r.Scan(&o.Lease.ID.Partition, &o.Lease.ID.UUID, &o.Lease.Epoch, &o.State, &o.Outcome)
		return o, err
	})
	return out, wrap("read how leases ended", err)
}
