package store

import (
	"context"

	"github.com/jackc/pgx/v5"

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
