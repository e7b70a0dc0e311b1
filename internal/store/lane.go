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
// claims in every other lane find none (and take no lock); its room
// (ff_lane_room, what its claims lock and its rate bucket) only while it
// is capped or rate-limited.
func SetLane(ctx context.Context, db DB, lane string, ch LaneChange) (*ffdtype.Lane, error) {
	rateSet, count, per, burst := rateArgs(ch.Rate)
	var l *ffdtype.Lane
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		// The time goes in through VALUES: a distributed Postgres allows
		// only immutable functions in DO UPDATE SET. A rate set anew
		// starts with a full bucket.
		var keep, room bool
		err := tx.QueryRow(ctx, `INSERT INTO ff_lane AS l (lane, paused, max_running, rate_count, rate_interval, rate_burst, updated_at)
			VALUES ($1, coalesce($2, false), CASE WHEN $3::int > 0 THEN $3::int END,
				$5::int, $6::bigint * interval '1 microsecond', $7::int, $8)
			ON CONFLICT (lane) DO UPDATE SET
				paused = coalesce($2, l.paused),
				max_running = CASE WHEN $3::int IS NULL THEN l.max_running WHEN $3::int > 0 THEN $3::int END,
				rate_count = CASE WHEN $4::boolean THEN excluded.rate_count ELSE l.rate_count END,
				rate_interval = CASE WHEN $4::boolean THEN excluded.rate_interval ELSE l.rate_interval END,
				rate_burst = CASE WHEN $4::boolean THEN excluded.rate_burst ELSE l.rate_burst END,
				updated_at = excluded.updated_at
			RETURNING l.paused OR l.max_running IS NOT NULL OR l.rate_count IS NOT NULL OR l.keyed,
				l.max_running IS NOT NULL OR l.rate_count IS NOT NULL`,
			lane, ch.Paused, ch.MaxRunning, rateSet, count, per, burst, time.Now()).Scan(&keep, &room)
		if err != nil {
			return err
		}
		if err := setLaneRoom(ctx, tx, lane, room, rateSet); err != nil {
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
		ls, err := listLanesRouted(ctx, tx, &lane)
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

// setLaneRoom keeps lane's row of ff_lane_room while it is capped or
// rate-limited (room), and empties its bucket when its rate is set anew
// (a new rate starts with a full bucket).
func setLaneRoom(ctx context.Context, tx pgx.Tx, lane string, room, rateSet bool) error {
	sql := `DELETE FROM ff_lane_room WHERE lane = $1`
	switch {
	case room && rateSet:
		sql = `INSERT INTO ff_lane_room (lane) VALUES ($1) ON CONFLICT (lane) DO UPDATE SET tokens = NULL, tokens_at = NULL`
	case room:
		sql = `INSERT INTO ff_lane_room (lane) VALUES ($1) ON CONFLICT (lane) DO NOTHING`
	}
	_, err := tx.Exec(ctx, sql, lane)
	return err
}

// ListLanes lists the lanes under control (a lane without a control row
// is neither paused, capped, rate-limited nor keyed), with what runs and
// waits in each.
func ListLanes(ctx context.Context, db DB) ([]*ffdtype.Lane, error) {
	ls, err := listLanesRouted(ctx, db, nil)
	return ls, wrap("list lanes", err)
}

// LaneKnown reports whether lane has a control row or a live execution:
// a setting for a lane that has neither is most likely a misspelt name.
// Pending rows are found through the claim index and running ones
// through the lease expiry index; blocked flow members, which no index
// serves by lane, are looked for last, by a scan, only when neither
// found one (a misspelt lane, or a lane of a flow's later steps only):
// an operator's call, not a hot path. Separate statements: a distributed
// Postgres reads ff_lane, a reference table, apart from the shards of
// ff_execution.
func LaneKnown(ctx context.Context, db DB, lane string) (bool, error) {
	for _, sql := range []string{
		`SELECT EXISTS (SELECT 1 FROM ff_lane WHERE lane = $1)`,
		`SELECT EXISTS (SELECT 1 FROM ff_execution WHERE state = 'pending' AND lane = $1)
			OR EXISTS (SELECT 1 FROM ff_execution WHERE state = 'running' AND lane = $1)`,
		`SELECT EXISTS (SELECT 1 FROM ff_execution WHERE state = 'blocked' AND lane = $1)`,
	} {
		var known bool
		if err := db.QueryRow(ctx, sql, lane).Scan(&known); err != nil || known {
			return known, wrap("look up lane "+lane, err)
		}
	}
	return false, nil
}
