package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// LaneLoad is one lane's live work.
type LaneLoad struct {
	Lane    string `db:"lane"`
	Pending int    `db:"pending"` // due now
	Delayed int    `db:"delayed"` // pending, due later
	Running int    `db:"running"`
	Blocked int    `db:"blocked"`
}

// LaneStat is one lane's live work as a daemon last sampled it
// (migration 00029): what the console and the daemons' metrics show,
// read from one row per lane instead of counted each time.
type LaneStat struct {
	LaneLoad
	// OldestDueAt is the run_at of the lane's oldest due pending
	// execution (nil: none due): the lane's lag is the sample's time
	// less it.
	OldestDueAt *time.Time `db:"oldest_due_at"`
	SampledAt   time.Time  `db:"sampled_at"`
}

// Lag is how long the lane's oldest due execution had waited when the
// sample was taken; 0 when none was due.
func (s LaneStat) Lag() time.Duration {
	if s.OldestDueAt == nil {
		return 0
	}
	return max(s.SampledAt.Sub(*s.OldestDueAt), 0)
}

// laneSampleSQL counts every lane's live work, each state read on its
// own so that each part uses its partial index (pending: the claim
// indexes, running: the lease index, blocked: the live-members index,
// whose predicate names flow_id, which every blocked row has): the cost
// follows the live rows, not the table. With it, the oldest due run_at
// and the time of the count.
const laneSampleSQL = `SELECT lane,
		count(*) FILTER (WHERE s = 'pending' AND due) AS pending,
		count(*) FILTER (WHERE s = 'pending' AND NOT due) AS delayed,
		count(*) FILTER (WHERE s = 'running') AS running,
		count(*) FILTER (WHERE s = 'blocked') AS blocked,
		min(run_at) FILTER (WHERE s = 'pending' AND due) AS oldest_due_at,
		now() AS sampled_at
	FROM (
		SELECT lane, 'pending' AS s, run_at, run_at <= now() AS due FROM ff_execution WHERE state = 'pending'
		UNION ALL SELECT lane, 'running', run_at, true FROM ff_execution WHERE state = 'running'
		UNION ALL SELECT lane, 'blocked', run_at, true FROM ff_execution WHERE state = 'blocked' AND flow_id IS NOT NULL
	) live
	GROUP BY lane ORDER BY lane`

// SampleLaneStats replaces the lane statistics with a fresh count, unless
// the last sample is younger than every or another session is taking
// one now (it holds the sampler's lock): so however many daemons call it,
// the lanes are counted about once per every. by names the sampler
// (shown with the sample). It reports whether it sampled.
func SampleLaneStats(ctx context.Context, db DB, every time.Duration, by string) (bool, error) {
	sampled := false
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		fresh, now, err := lockLaneSample(ctx, tx, every)
		if err != nil || fresh {
			return err
		}
		stats, err := CountLanes(ctx, tx)
		if err != nil {
			return err
		}
		sampled = true
		return writeLaneStats(ctx, tx, stats, now, by)
	})
	if errors.Is(err, errSampleTaken) {
		return false, nil
	}
	return sampled, wrap("sample lane statistics", err)
}

// errSampleTaken: another session is sampling.
var errSampleTaken = errors.New("another session is sampling the lanes")

// LaneSampleLock is the transaction-scoped advisory lock a sampler of
// the lane statistics holds ("ffd.lane" in ASCII): one sample at a time
// per node.
const LaneSampleLock int64 = 0x6666642e6c616e65

// lockLaneSample takes the sampler's advisory lock for tx and reports
// whether the last sample is younger than every, with the transaction's
// time; errSampleTaken when another session holds the lock. An advisory
// lock, not the sample row's: a distributed Postgres serializes writers
// of a reference table with locks of its own on the nodes, which neither
// SKIP LOCKED nor lock_timeout reach (a second sampler waited for the
// first's commit). It holds on the node the session is connected to, so
// daemons connected to different nodes may sample at the same moment:
// the sample is written twice, which costs a count and changes nothing.
func lockLaneSample(ctx context.Context, tx pgx.Tx, every time.Duration) (fresh bool, now time.Time, err error) {
	var locked bool
	err = tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1),
			coalesce((SELECT sampled_at > now() - $2::bigint * interval '1 microsecond' FROM ff_lane_stats_sample), false), now()`,
		LaneSampleLock, micros(every)).Scan(&locked, &fresh, &now)
	if err == nil && !locked {
		err = errSampleTaken
	}
	return fresh, now, err
}

// writeLaneStats replaces the rows of ff_lane_stats with stats, counted
// at now (the transaction's time, passed as a value: a distributed
// Postgres allows only immutable functions in DO UPDATE SET), in one
// pipelined batch: the lanes gone deleted, the others written through
// unnest, the sample's row stamped.
func writeLaneStats(ctx context.Context, tx pgx.Tx, stats []LaneStat, now time.Time, by string) error {
	n := len(stats)
	lanes := make([]string, n)
	pending, delayed, running, blocked := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	oldest := make([]*time.Time, n)
	for i, s := range stats {
		lanes[i], oldest[i] = s.Lane, s.OldestDueAt
		pending[i], delayed[i], running[i], blocked[i] = int64(s.Pending), int64(s.Delayed), int64(s.Running), int64(s.Blocked)
	}
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM ff_lane_stats WHERE lane <> ALL($1::text[])`, lanes)
	if n > 0 {
		b.Queue(`INSERT INTO ff_lane_stats (lane, pending, delayed, running, blocked, oldest_due_at, sampled_at)
			SELECT l, p, d, r, b, o, $7 FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[], $6::timestamptz[]) AS u(l, p, d, r, b, o)
			ON CONFLICT (lane) DO UPDATE SET pending = EXCLUDED.pending, delayed = EXCLUDED.delayed, running = EXCLUDED.running,
				blocked = EXCLUDED.blocked, oldest_due_at = EXCLUDED.oldest_due_at, sampled_at = EXCLUDED.sampled_at`,
			lanes, pending, delayed, running, blocked, oldest, now)
	}
	// An upsert, so that a sample row deleted by hand comes back rather
	// than leaving every sample looking stale.
	b.Queue(`INSERT INTO ff_lane_stats_sample (id, sampled_at, sampled_by) VALUES (true, $1, $2)
		ON CONFLICT (id) DO UPDATE SET sampled_at = EXCLUDED.sampled_at, sampled_by = EXCLUDED.sampled_by`, now, by)
	return tx.SendBatch(ctx, b).Close()
}

// LaneStats reads the lane statistics of the last sample, by lane, and
// when it was taken (zero: never), in one round trip.
func LaneStats(ctx context.Context, db DB) (stats []LaneStat, at time.Time, err error) {
	var when *time.Time
	b := &pgx.Batch{}
	b.Queue(`SELECT max(sampled_at) FROM ff_lane_stats_sample`).QueryRow(func(row pgx.Row) error { return row.Scan(&when) })
	b.Queue(`SELECT lane, pending, delayed, running, blocked, oldest_due_at, sampled_at
		FROM ff_lane_stats ORDER BY lane`).Query(func(rows pgx.Rows) error {
		stats, err = pgx.CollectRows(rows, pgx.RowToStructByName[LaneStat])
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, time.Time{}, wrap("read lane statistics", err)
	}
	if when != nil {
		at = *when
	}
	return stats, at, nil
}

// CountLanes counts every lane's live work now, as a sample would: for
// when no daemon has sampled lately.
func CountLanes(ctx context.Context, db DB) ([]LaneStat, error) {
	rows, err := db.Query(ctx, laneSampleSQL)
	if err != nil {
		return nil, wrap("count lanes' live work", err)
	}
	stats, err := pgx.CollectRows(rows, pgx.RowToStructByName[LaneStat])
	return stats, wrap("count lanes' live work", err)
}
