package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
)

// Attempt is one row of ff_attempt_all: one claim of an execution and how
// it ended (an ff_attempt row, or the attempt held on the execution row).
type Attempt struct {
	Attempt    int        `db:"attempt"`
	LeaseEpoch int64      `db:"lease_epoch"`
	Worker     string     `db:"worker"`
	StartedAt  time.Time  `db:"started_at"`
	EndedAt    *time.Time `db:"ended_at"`
	Outcome    *string    `db:"outcome"` // nil while running
	Error      *string    `db:"error"`
}

// ListAttempts reads an execution's attempts, first first.
func ListAttempts(ctx context.Context, db DB, id ident.ExecutionID) ([]Attempt, error) {
	rows, err := db.Query(ctx, `SELECT attempt, lease_epoch, worker, started_at, ended_at, outcome, error
		FROM ff_attempt_all WHERE partition_key = $1 AND execution_id = $2 ORDER BY attempt`, id.Partition, id.UUID)
	if err != nil {
		return nil, wrap("list attempts of "+id.String(), err)
	}
	as, err := pgx.CollectRows(rows, pgx.RowToStructByName[Attempt])
	return as, wrap("list attempts of "+id.String(), err)
}
