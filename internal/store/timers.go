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

// TimersForLeaseEvents returns the timers that the given lease events call
// for: the new expiry of an acquired or renewed lease still held, and the
// retry time of an execution a released, expired or revoked lease left
// pending for later. It also returns the leases the events show ended (the
// execution no longer runs at the event's epoch), so that the caller can
// drop their expiry timers instead of checking each one when it comes due.
//
// The lease events are read first, once, by their ids (a materialized
// CTE): joined directly, stale statistics during a burst let the planner
// start from every running execution and re-test the whole id list against
// each of them, quadratic work that cost more than the claim and the
// completion together. Each id is looked up on its own (LATERAL, LIMIT 1):
// the event-id index is not unique (a distributed table cannot have it
// so), and with `event_id = ANY($1)` the planner, which no longer knows
// each id matches one row, guessed hundreds per id during a burst and
// scanned the table (three times the time of the lookups, measured).
func TimersForLeaseEvents(ctx context.Context, db DB, eventIDs []int64) ([]Timer, []LeaseRef, error) {
	rows, err := db.Query(ctx, `
		WITH l AS MATERIALIZED (
			SELECT l.partition_key, l.execution_id, l.lease_epoch
			FROM unnest($1::bigint[]) AS i(id)
			CROSS JOIN LATERAL (SELECT partition_key, execution_id, lease_epoch FROM ff_lease_event
				WHERE event_id = i.id LIMIT 1) l)
		SELECT e.partition_key, e.execution_id, e.lease_epoch, l.lease_epoch,
			e.state = 'running' AND e.lease_epoch = l.lease_epoch,
			CASE WHEN e.state = 'running' THEN least(e.lease_expires_at, coalesce(e.attempt_deadline_at, 'infinity'))
				WHEN e.state = 'pending' AND e.run_at > now() THEN e.run_at END,
			e.lane
		FROM l
		JOIN ff_execution e ON e.partition_key = l.partition_key AND e.execution_id = l.execution_id`, eventIDs)
	if err != nil {
		return nil, nil, wrap("read timers of lease events", err)
	}
	defer rows.Close()
	var timers []Timer
	var ended []LeaseRef
	for rows.Next() {
		var id ffdtype.ExecutionID
		var epoch, eventEpoch int64
		var held bool
		var at *time.Time
		var lane string
		if err := rows.Scan(&id.Partition, &id.UUID, &epoch, &eventEpoch, &held, &at, &lane); err != nil {
			return nil, nil, wrap("read timers of lease events", err)
		}
		switch {
		case held:
			timers = append(timers, Timer{Kind: TimerLease, ID: id, Epoch: epoch, At: *at, Lane: lane})
		default:
			ended = append(ended, LeaseRef{ID: id, Epoch: eventEpoch})
			if at != nil { // left pending until a later run_at
				timers = append(timers, Timer{Kind: TimerDue, ID: id, Epoch: epoch, At: *at, Lane: lane})
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, wrap("read timers of lease events", err)
	}
	return timers, ended, nil
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
func NotifyDueLanes(ctx context.Context, db DB, since time.Time) ([]string, time.Time, error) {
	rows, err := db.Query(ctx, `
		WITH now AS (SELECT now() AS t)
		SELECT d.lane, pg_notify($2, d.lane) IS NULL, now.t
		FROM now, LATERAL (
			SELECT DISTINCT lane FROM ff_execution
			WHERE state = 'pending' AND run_at > $1 AND run_at <= now.t AND run_at > created_at) d`, since, ChannelReady)
	if err != nil {
		return nil, since, wrap("notify due lanes", err)
	}
	var lanes []string
	next := since
	for rows.Next() {
		var lane string
		var ignored bool
		if err := rows.Scan(&lane, &ignored, &next); err != nil {
			rows.Close()
			return nil, since, wrap("notify due lanes", err)
		}
		lanes = append(lanes, lane)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, since, wrap("notify due lanes", err)
	}
	if len(lanes) == 0 {
		// Nothing came due; still move the watermark to the database's now.
		if err := db.QueryRow(ctx, `SELECT now()`).Scan(&next); err != nil {
			return nil, since, wrap("read database time", err)
		}
	}
	return lanes, next, nil
}

// LostLeases returns those of the given leases that are no longer held:
// the execution does not run at that epoch any more.
func LostLeases(ctx context.Context, db DB, held []LeaseRef) ([]LeaseRef, error) {
	parts, ids, epochs := make([]int16, len(held)), make([]pgtype.UUID, len(held)), make([]int64, len(held))
	for i, l := range held {
		parts[i], ids[i], epochs[i] = l.ID.Partition, pgUUID(l.ID.UUID), l.Epoch
	}
	rows, err := db.Query(ctx, `
		SELECT i.partition_key, i.execution_id, i.lease_epoch
		FROM unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(partition_key, execution_id, lease_epoch)
		WHERE NOT EXISTS (SELECT 1 FROM ff_execution e
			WHERE e.partition_key = i.partition_key AND e.execution_id = i.execution_id
				AND e.state = 'running' AND e.lease_epoch = i.lease_epoch)`, parts, ids, epochs)
	if err != nil {
		return nil, wrap("check held leases", err)
	}
	lost, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (LeaseRef, error) {
		var l LeaseRef
		err := r.Scan(&l.ID.Partition, &l.ID.UUID, &l.Epoch)
		return l, err
	})
	return lost, wrap("check held leases", err)
}
