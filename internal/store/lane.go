package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// Lane is a lane's control row: a lane without one is neither paused nor
// limited.
type Lane struct {
	Lane       string    `db:"lane"`
	Paused     bool      `db:"paused"`
	MaxRunning *int      `db:"max_running"`
	UpdatedAt  time.Time `db:"updated_at"`
}

// SetLane pauses or resumes a lane (paused nil: unchanged) and sets its
// running limit (max nil: unchanged; 0: none), then wakes its workers. A
// row is kept only while the lane is paused or limited, so that claims in
// every other lane find none (and take no lock).
func SetLane(ctx context.Context, db DB, lane string, paused *bool, max *int) (*Lane, error) {
	var l Lane
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `INSERT INTO ff_lane AS l (lane, paused, max_running)
			VALUES ($1, coalesce($2, false), CASE WHEN $3::int > 0 THEN $3::int END)
			ON CONFLICT (lane) DO UPDATE SET
				paused = coalesce($2, l.paused),
				max_running = CASE WHEN $3::int IS NULL THEN l.max_running WHEN $3::int > 0 THEN $3::int END,
				updated_at = now()
			RETURNING l.lane, l.paused, l.max_running, l.updated_at`, lane, paused, max).
			Scan(&l.Lane, &l.Paused, &l.MaxRunning, &l.UpdatedAt)
		if err != nil {
			return err
		}
		if !l.Paused && l.MaxRunning == nil {
			if _, err := tx.Exec(ctx, `DELETE FROM ff_lane WHERE lane = $1`, lane); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelReady, lane)
		return err
	})
	if err != nil {
		return nil, wrap("set lane "+lane, err)
	}
	return &l, nil
}

// ListLanes lists the lanes that are paused or limited.
func ListLanes(ctx context.Context, db DB) ([]*Lane, error) {
	rows, err := db.Query(ctx, `SELECT lane, paused, max_running, updated_at FROM ff_lane ORDER BY lane`)
	if err != nil {
		return nil, wrap("list lanes", err)
	}
	ls, err := pgx.CollectRows(rows, pgx.RowToAddrOfStructByName[Lane])
	return ls, wrap("list lanes", err)
}
