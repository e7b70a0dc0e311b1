package store

import (
	"context"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5"
)

// LaneChange is a change to a lane's control; nil fields stay as they
// are.
type LaneChange struct {
	Paused     *bool
	MaxRunning *int          // 0: no cap
	Rate       *ffdtype.Rate // Count 0: no rate
}

// SetLane changes a lane's control, then wakes its workers. A row is kept
// only while the lane is paused, capped, rate-limited or keyed, so that
// claims in every other lane find none (and take no lock).
func SetLane(ctx context.Context, db DB, lane string, ch LaneChange) (*ffdtype.Lane, error) {
	rateSet, count, per, burst := rateArgs(ch.Rate)
	var l *ffdtype.Lane
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		// The time goes in through VALUES: a distributed Postgres allows
		// only immutable functions in DO UPDATE SET. A rate set anew
		// starts with a full bucket.
		var keep bool
		err := tx.QueryRow(ctx, `INSERT INTO ff_lane AS l (lane, paused, max_running, rate_count, rate_interval, rate_burst, updated_at)
			VALUES ($1, coalesce($2, false), CASE WHEN $3::int > 0 THEN $3::int END,
				$5::int, $6::bigint * interval '1 microsecond', $7::int, $8)
			ON CONFLICT (lane) DO UPDATE SET
				paused = coalesce($2, l.paused),
				max_running = CASE WHEN $3::int IS NULL THEN l.max_running WHEN $3::int > 0 THEN $3::int END,
				rate_count = CASE WHEN $4::boolean THEN excluded.rate_count ELSE l.rate_count END,
				rate_interval = CASE WHEN $4::boolean THEN excluded.rate_interval ELSE l.rate_interval END,
				rate_burst = CASE WHEN $4::boolean THEN excluded.rate_burst ELSE l.rate_burst END,
				tokens = CASE WHEN $4::boolean THEN NULL ELSE l.tokens END,
				tokens_at = CASE WHEN $4::boolean THEN NULL ELSE l.tokens_at END,
				updated_at = excluded.updated_at
			RETURNING l.paused OR l.max_running IS NOT NULL OR l.rate_count IS NOT NULL OR l.keyed`,
			lane, ch.Paused, ch.MaxRunning, rateSet, count, per, burst, time.Now()).Scan(&keep)
		if err != nil {
			return err
		}
		if !keep {
			if _, err := tx.Exec(ctx, `DELETE FROM ff_lane WHERE lane = $1`, lane); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, ChannelReady, lane); err != nil {
			return err
		}
		ls, err := listLanes(ctx, tx, &lane)
		if err != nil {
			return err
		}
		if len(ls) == 1 {
			l = ls[0]
		} else {
			l = &ffdtype.Lane{Name: lane, UpdatedAt: time.Now()}
		}
		return nil
	})
	if err != nil {
		return nil, wrap("set lane "+lane, err)
	}
	return l, nil
}

// laneListSQL lists lanes under control ($1: only that one), with what
// runs and is due in each, and, for keyed lanes, how many keys hold due
// executions back (at their running limit or out of rate tokens) and how
// many due executions wait behind them.
var laneListSQL = `
WITH clock AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.lane, l.paused, coalesce(l.max_running, 0), l.rate_count,
	(extract(epoch FROM l.rate_interval) * 1e6)::bigint, l.rate_burst, l.keyed, l.updated_at,
	(SELECT count(*) FROM ff_execution r WHERE r.state = 'running' AND r.lane = l.lane),
	(SELECT count(*) FROM ff_execution e WHERE e.state = 'pending' AND e.lane = l.lane AND e.run_at <= now()),
	CASE WHEN l.rate_count IS NOT NULL THEN ` + tokensAt("l", "clock.t") + ` END,
	h.keys, h.held, h.waiting
FROM ff_lane l CROSS JOIN clock
CROSS JOIN LATERAL (
	SELECT count(*) FILTER (WHERE k.key <> '') AS keys,
		count(*) FILTER (WHERE k.held) AS held,
		coalesce(sum(k.due) FILTER (WHERE k.held), 0) AS waiting
	FROM (
		SELECT k.key, d.due, d.due > 0 AND (
				(k.max_running IS NOT NULL AND k.max_running <= (SELECT count(*) FILTER (WHERE r.state = 'running')
					FROM ff_execution r WHERE r.state IN ('blocked', 'running') AND r.lane = k.lane AND r.concurrency_key = k.key))
				OR (k.rate_count IS NOT NULL AND ` + tokensAt("k", "clock.t") + ` < 1)) AS held
		FROM ff_key k
		CROSS JOIN LATERAL (SELECT count(*) AS due FROM ff_execution e
			WHERE e.state = 'pending' AND e.lane = k.lane AND e.run_at <= now() AND e.concurrency_key = k.key) d
		WHERE k.lane = l.lane AND k.key <> ''
	) k
) h
WHERE $1::text IS NULL OR l.lane = $1
ORDER BY l.lane`

func listLanes(ctx context.Context, db DB, only *string) ([]*ffdtype.Lane, error) {
	if dist, err := Distributed(ctx, db); err != nil || dist {
		if err != nil {
			return nil, err
		}
		return listLanesRouted(ctx, db, only)
	}
	rows, err := db.Query(ctx, laneListSQL, only)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ffdtype.Lane, error) {
		var l ffdtype.Lane
		var count, burst *int
		var per *int64
		var tokens *float64
		if err := row.Scan(&l.Name, &l.Paused, &l.MaxRunning, &count, &per, &burst, &l.Keyed, &l.UpdatedAt,
			&l.Running, &l.Due, &tokens, &l.Keys, &l.KeysHeld, &l.WaitingHeld); err != nil {
			return nil, err
		}
		if count != nil {
			l.Rate = &ffdtype.Rate{Count: *count, Per: time.Duration(*per) * time.Microsecond, Burst: *burst}
		}
		if tokens != nil {
			l.Tokens = *tokens
		}
		return &l, nil
	})
}

// ListLanes lists the lanes under control (a lane without a control row
// is neither paused, capped, rate-limited nor keyed), with what runs and
// waits in each.
func ListLanes(ctx context.Context, db DB) ([]*ffdtype.Lane, error) {
	ls, err := listLanes(ctx, db, nil)
	return ls, wrap("list lanes", err)
}
