package store

import (
	"context"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5"
)

// SetLane pauses or resumes a lane (paused nil: unchanged) and sets its
// running limit (max nil: unchanged; 0: none), then wakes its workers. A
// row is kept only while the lane is paused or limited, so that claims in
// every other lane find none (and take no lock).
func SetLane(ctx context.Context, db DB, lane string, paused *bool, max *int) (*ffdtype.Lane, error) {
	var l ffdtype.Lane
	var maxRunning *int
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		// The time goes in through VALUES: a distributed Postgres allows
		// only immutable functions in DO UPDATE SET.
		err := tx.QueryRow(ctx, `INSERT INTO ff_lane AS l (lane, paused, max_running, updated_at)
			VALUES ($1, coalesce($2, false), CASE WHEN $3::int > 0 THEN $3::int END, now())
			ON CONFLICT (lane) DO UPDATE SET
				paused = coalesce($2, l.paused),
				max_running = CASE WHEN $3::int IS NULL THEN l.max_running WHEN $3::int > 0 THEN $3::int END,
				updated_at = excluded.updated_at
			RETURNING l.lane, l.paused, l.max_running, l.updated_at`, lane, paused, max).
			Scan(&l.Name, &l.Paused, &maxRunning, &l.UpdatedAt)
		if err != nil {
			return err
		}
		if maxRunning != nil {
			l.MaxRunning = *maxRunning
		}
		if !l.Paused && maxRunning == nil {
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

// ListLanes lists the lanes that are paused or limited (a lane without a
// control row is neither).
func ListLanes(ctx context.Context, db DB) ([]*ffdtype.Lane, error) {
	rows, err := db.Query(ctx, `SELECT lane, paused, coalesce(max_running, 0), updated_at FROM ff_lane ORDER BY lane`)
	if err != nil {
		return nil, wrap("list lanes", err)
	}
	ls, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ffdtype.Lane, error) {
		var l ffdtype.Lane
		return &l, row.Scan(&l.Name, &l.Paused, &l.MaxRunning, &l.UpdatedAt)
	})
	return ls, wrap("list lanes", err)
}
