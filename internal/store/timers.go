package store

import (
	"context"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// TimerKind says what a Timer acts on when it fires.
type TimerKind int

// Timer kinds.
const (
	// TimerLease fires when a running lease lapses or its attempt times out.
	TimerLease TimerKind = iota
	// TimerDeadline fires when an execution's deadline passes.
	TimerDeadline
	// TimerDue fires when a delayed pending execution becomes claimable.
	TimerDue
)

// Timer is a moment at which the daemon's timeout worker must act.
type Timer struct {
	Kind  TimerKind
	ID    ffdtype.ExecutionID
	Epoch int64 // TimerLease: the lease it concerns
	At    time.Time
	Lane  string
}

const timerColumns = `partition_key, execution_id, lease_epoch, at, lane, kind`

// UpcomingTimers returns the soonest timers of each kind, at most limit of
// each: lease expiries and attempt timeouts of running executions,
// deadlines of live ones, and run_at of delayed pending ones. A pending
// row with run_at in the future was written with run_at after created_at,
// so "run_at > created_at" changes no answer and lets the query use
// ff_execution_later (migration 00008), which only holds such rows.
func UpcomingTimers(ctx context.Context, db DB, limit int) ([]Timer, error) {
	rows, err := db.Query(ctx, `
		(SELECT `+timerColumns+` FROM (
			SELECT partition_key, execution_id, lease_epoch,
				least(lease_expires_at, coalesce(attempt_deadline_at, 'infinity')) AS at, lane, $2::int AS kind
			FROM ff_execution WHERE state = 'running' ORDER BY lease_expires_at LIMIT $1) l)
		UNION ALL
		(SELECT partition_key, execution_id, lease_epoch, attempt_deadline_at, lane, $2::int
			FROM ff_execution WHERE state = 'running' AND attempt_deadline_at IS NOT NULL
			ORDER BY attempt_deadline_at LIMIT $1)
		UNION ALL
		(SELECT partition_key, execution_id, lease_epoch, deadline_at, lane, $3::int
			FROM ff_execution WHERE deadline_at IS NOT NULL AND state IN ('blocked', 'pending', 'running')
			ORDER BY deadline_at LIMIT $1)
		UNION ALL
		(SELECT partition_key, execution_id, lease_epoch, run_at, lane, $4::int
			FROM ff_execution WHERE state = 'pending' AND run_at > now() AND run_at > created_at
			ORDER BY run_at LIMIT $1)`, limit, TimerLease, TimerDeadline, TimerDue)
	if err != nil {
		return nil, wrap("read upcoming timers", err)
	}
	return collectTimers(rows)
}

// LeaseRef names one lease: an execution at an epoch.
type LeaseRef struct {
	ID    ffdtype.ExecutionID
	Epoch int64
}

func collectTimers(rows pgx.Rows) ([]Timer, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Timer, error) {
		var t Timer
		var kind int
		err := r.Scan(&t.ID.Partition, &t.ID.UUID, &t.Epoch, &t.At, &t.Lane, &kind)
		t.Kind = TimerKind(kind)
		return t, err
	})
	return out, wrap("read timers", err)
}

// NotifyDueLanes sends ff_ready for every lane with a pending execution
// whose run_at passed after since (and is now due), and returns the lanes
// and the database time to pass as since next time. Rows due when written
// (run_at = created_at) are left out: their insert notified already.
//
// The database's now() is read first and bounds the scan, so that every
// node of a distributed Postgres scans up to the same instant; the lanes
// are grouped rather than DISTINCT-ed, which a distributed Postgres runs
// on each node and merges.
func NotifyDueLanes(ctx context.Context, db DB, since time.Time) ([]string, time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, since, wrap("read database time", err)
	}
	rows, err := db.Query(ctx, `
		SELECT lane FROM ff_execution
		WHERE state = 'pending' AND run_at > $1 AND run_at <= $2 AND run_at > created_at
		GROUP BY lane`, since, now)
	if err != nil {
		return nil, since, wrap("read due lanes", err)
	}
	lanes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, since, wrap("read due lanes", err)
	}
	notices := &Notices{}
	for _, l := range lanes {
		notices.Ready(l)
	}
	if err := notices.Send(ctx, db); err != nil {
		return nil, since, wrap("notify due lanes", err)
	}
	return lanes, now, nil
}

// LostLeases returns those of the given leases that are no longer held:
// the execution does not run at that epoch any more. It reads those
// still held (a join, which a distributed Postgres runs on the shards
// of the leases' partitions; it refuses the anti-join's correlated
// subquery) and returns the rest.
func LostLeases(ctx context.Context, db DB, held []LeaseRef) ([]LeaseRef, error) {
	parts, ids, epochs := make([]int16, len(held)), make([]pgtype.UUID, len(held)), make([]int64, len(held))
	for i, l := range held {
		parts[i], ids[i], epochs[i] = l.ID.Partition, pgUUID(l.ID.UUID), l.Epoch
	}
	rows, err := db.Query(ctx, `
		SELECT e.partition_key, e.execution_id, e.lease_epoch
		FROM ff_execution e
		JOIN unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(partition_key, execution_id, lease_epoch)
			ON e.partition_key = i.partition_key AND e.execution_id = i.execution_id AND e.lease_epoch = i.lease_epoch
		WHERE e.partition_key = ANY($1::smallint[]) AND e.state = 'running'`, parts, ids, epochs)
	if err != nil {
		return nil, wrap("check held leases", err)
	}
	still := map[LeaseRef]bool{}
	var l LeaseRef
	if _, err := pgx.ForEachRow(rows, []any{&l.ID.Partition, &l.ID.UUID, &l.Epoch}, func() error {
		still[l] = true
		return nil
	}); err != nil {
		return nil, wrap("check held leases", err)
	}
	var lost []LeaseRef
	for _, h := range held {
		if !still[h] {
			lost = append(lost, h)
		}
	}
	return lost, nil
}
