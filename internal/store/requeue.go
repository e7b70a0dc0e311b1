package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// RequeueKind is how a running attempt ends without ending the execution.
type RequeueKind struct {
	attemptOutcome ffdtype.AttemptOutcome // on the attempt's ff_attempt row
	leaseEvent     LeaseEventType         // on ff_lease_event; "" for none
	bumpEpoch      bool                   // the holder is fenced (it did not give the lease up itself)
	backoff        bool                   // run_at after backoff, else now
}

var (
	// The holder failed and a retry is allowed. It gave the lease up
	// itself: no lease event (the attempt row says it all).
	RequeueFailed = RequeueKind{ffdtype.AttemptFailed, "", false, true}
	// The holder failed but asked for an immediate retry (worker shutdown).
	RequeueFailedNow = RequeueKind{ffdtype.AttemptFailed, "", false, false}
	// The lease lapsed or the attempt ran out of time; attempts remain.
	RequeueTimedOut = RequeueKind{ffdtype.AttemptTimedOut, LeaseExpired, true, true}
	// An operator took the lease away.
	RequeueRevoked = RequeueKind{ffdtype.AttemptRevoked, LeaseRevoked, true, false}
)

// backoffSQL is run_at after a failed attempt, computed in the database from
// the row's policy: min(base·multiplier^(attempt-1), max) ± jitter. The
// exponent is clamped so the double cannot overflow. The jitter's draw in
// [0, 1) is a hash of the execution and its attempt, not random(): the
// executions that failed together still spread apart, and the statement
// stays free of volatile functions, which a distributed Postgres refuses
// in an UPDATE (nowPlus says why the time is spelled so).
var backoffSQL = nowPlus(`least(` + intervalSeconds("e.backoff_max") + `,
		` + intervalSeconds("e.backoff_base") + ` * power(e.backoff_multiplier, least(greatest(e.attempt - 1, 0), 60)))
	* (1 + e.backoff_jitter * (2 * ((hashtextextended(e.execution_id::text || ':' || e.attempt::text, 0) & 1048575)::float8 / 1048576) - 1))`)

// The parts of requeueSQL and requeueRoutedSQL that are the same: the
// requeue's columns, and what follows the UPDATE (the attempt row, the
// lease event, the answer).
var (
	requeueSet = `
		state = 'pending',
		run_at = CASE WHEN $7 THEN ` + backoffSQL + ` ELSE now() END,
		last_error = coalesce(l.error, e.last_error),
		lease_epoch = e.lease_epoch + CASE WHEN $6 THEN 1 ELSE 0 END,
		lease_owner = NULL, lease_expires_at = NULL, attempt_deadline_at = NULL,
		attempt_worker = NULL, attempt_started_at = NULL`
	requeueTail = `
	RETURNING e.partition_key, e.execution_id, e.attempt, e.lease_epoch, e.run_at, e.lane, l.epoch AS old_epoch, l.error,
		l.attempt_worker, l.attempt_started_at, l.lease_expired_at
), att AS (
	INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome, error)
	SELECT partition_key, execution_id, attempt, old_epoch, attempt_worker, attempt_started_at, now(), $5, error
	FROM upd
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
	SELECT partition_key, execution_id, old_epoch, attempt, attempt_worker, $9, lease_expired_at
	FROM upd WHERE $9 <> ''
)
SELECT partition_key, execution_id, attempt, lease_epoch, run_at, lane, old_epoch FROM upd`
)

// requeueSQL ends the running attempt of each input execution still held
// at its epoch, puts the execution back to pending, and writes the
// attempt's ff_attempt row from what the row held (attempt_worker,
// attempt_started_at, which it clears), and the lease event of a lease
// taken away ($9: expired, revoked; "" for none), with the expiry the
// lease had then. Unless forced ($8), only an execution with attempts
// left is requeued: max_attempts, plus its attempts that ended in waits
// ($10, read by WaitsOf for the executions a first pass found out of
// attempts).
var requeueSQL = `
WITH input AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::bigint[], $4::text[], $10::int[])
		AS i(partition_key, execution_id, epoch, error, waits)
), locked AS (
	SELECT e.partition_key, e.execution_id, i.epoch, i.error, e.attempt_worker, e.attempt_started_at,
		e.lease_expires_at AS lease_expired_at
	FROM ff_execution e
	JOIN input i ON i.partition_key = e.partition_key AND i.execution_id = e.execution_id
	-- isRunning: a test no partial index's predicate implies, so that
	-- the rows are found by their key, as the renewal's are.
	WHERE ` + isRunning("e.") + ` AND e.lease_epoch = i.epoch
		AND ($8 OR e.attempt < e.max_attempts + i.waits)
	ORDER BY e.partition_key, e.execution_id
	FOR NO KEY UPDATE OF e
), upd AS (
	UPDATE ff_execution e SET
` + requeueSet + `
	FROM locked l
	WHERE e.partition_key = l.partition_key AND e.execution_id = l.execution_id
` + requeueTail

// requeueRoutedSQL is requeueSQL for the partitions of one shard ($10;
// the waits are $11) of a distributed Postgres, shaped as terminateRoutedSQL is and for the
// same reasons (and locking in the same order): the
// rows locked by a subquery of the UPDATE, the inserts selecting from its
// result.
var requeueRoutedSQL = `
WITH upd AS (
	UPDATE ff_execution e SET
` + requeueSet + `
	FROM (
		SELECT x.partition_key, x.execution_id, i.epoch, i.error, x.attempt_worker, x.attempt_started_at,
			x.lease_expires_at AS lease_expired_at
		FROM ff_execution x
		JOIN unnest($1::smallint[], $2::uuid[], $3::bigint[], $4::text[], $11::int[]) AS i(partition_key, execution_id, epoch, error, waits)
			ON i.partition_key = x.partition_key AND i.execution_id = x.execution_id
		WHERE x.partition_key = ANY($10::smallint[]) AND ` + isRunning("x.") + ` AND x.lease_epoch = i.epoch
			AND ($8 OR x.attempt < x.max_attempts + i.waits)
		ORDER BY x.partition_key, x.execution_id
		FOR NO KEY UPDATE OF x
	) l
	WHERE e.partition_key = ANY($10::smallint[]) AND e.partition_key = l.partition_key
		AND e.execution_id = l.execution_id
` + requeueTail

// requeued records what r's requeue (of the lease held at heldEpoch)
// owes its listeners: its lane's workers, when it is claimable now, or
// the daemon, of when it comes due
// (a retry after backoff; the soonest of a batch is enough, its timer
// finds the others); and for a lease taken away, its holder and the
// lease event's consumers.
func (n *Notices) requeued(kind RequeueKind, r ffdtype.Requeued, lane string, heldEpoch int64) {
	if kind.backoff {
		n.due(r.RunAt)
	} else {
		n.Ready(lane)
	}
	if kind.leaseEvent != "" {
		n.LeaseEvents(r.ID.Partition)
	}
	if kind.bumpEpoch {
		n.Revoked(r.ID, heldEpoch)
	}
}

// RequeueItem is one lease to end: an execution at an epoch.
type RequeueItem struct {
	ID    ffdtype.ExecutionID
	Epoch int64
	Error string
}

// Requeue puts running executions back to pending, fenced on their epoch.
// Unless force is set, only those with attempts left are requeued; the
// caller ends the others through Terminate.
func Requeue(ctx context.Context, db DB, kind RequeueKind, force bool, items []RequeueItem) ([]ffdtype.Requeued, error) {
	if len(items) == 0 {
		return nil, nil
	}
	n := len(items)
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, err
	}
	done, err := requeueOnce(ctx, db, dist, kind, force, items, nil)
	if err != nil {
		return nil, wrap(fmt.Sprintf("requeue %d executions (%s)", n, kind.attemptOutcome), unroutable(db, err))
	}
	// The attempts that ended in waits extend the budget. Only an
	// execution the statement found out of attempts can have any to
	// count, so only those are asked about (WaitsOf), and requeued again
	// with them: an execution that never waited costs what it did
	// before waits existed. A forced requeue checks no budget.
	if !force && len(done) < len(items) {
		requeued := make(map[ffdtype.ExecutionID]bool, len(done))
		for _, r := range done {
			requeued[r.ID] = true
		}
		var rest []RequeueItem
		var ids []ffdtype.ExecutionID
		for _, it := range items {
			if !requeued[it.ID] {
				rest, ids = append(rest, it), append(ids, it.ID)
			}
		}
		waits, err := WaitsOf(ctx, db, ids)
		if err != nil {
			return nil, err
		}
		if len(waits) > 0 {
			more, err := requeueOnce(ctx, db, dist, kind, force, rest, waits)
			if err != nil {
				return nil, wrap(fmt.Sprintf("requeue %d executions that waited (%s)", len(rest), kind.attemptOutcome), unroutable(db, err))
			}
			done = append(done, more...)
		}
	}
	notices := &Notices{}
	out := make([]ffdtype.Requeued, len(done))
	for i, r := range done {
		out[i] = r.Requeued
		notices.requeued(kind, r.Requeued, r.lane, r.held)
	}
	// What to announce is known only from what was requeued (lanes, due
	// times), so it follows the statement: in the caller's transaction,
	// or just after the statement's own committed. A crash in between
	// loses only hints, which workers' polls and the daemon's timers
	// recover.
	if err := notices.Send(ctx, db); err != nil {
		return nil, wrap(fmt.Sprintf("announce %d requeued executions", len(out)), err)
	}
	return out, nil
}

// requeuedRow is one execution a requeue statement put back, with what
// its notices need: its lane, and the epoch it was held at.
type requeuedRow struct {
	ffdtype.Requeued
	lane string
	held int64
}

// requeueOnce runs the requeue statement over items: one statement for
// all; on a distributed Postgres one per shard, in shard order, in one
// pipelined batch (one transaction). waits extends the attempt budget of
// the executions it names.
func requeueOnce(ctx context.Context, db DB, dist bool, kind RequeueKind, force bool, items []RequeueItem,
	waits map[ffdtype.ExecutionID]int) ([]requeuedRow, error) {
	groups := []shardGroup[RequeueItem]{{items: items}}
	if dist {
		var err error
		if groups, err = byShard(ctx, db, items, func(it RequeueItem) int16 { return it.ID.Partition }); err != nil {
			return nil, err
		}
	}
	var out []requeuedRow
	err := WithRetry(ctx, db, func() error {
		out = out[:0]
		scan := func(rows pgx.Rows) error {
			for rows.Next() {
				var r requeuedRow
				if err := rows.Scan(&r.ID.Partition, &r.ID.UUID, &r.Attempt, &r.LeaseEpoch, &r.RunAt, &r.lane, &r.held); err != nil {
					return err
				}
				out = append(out, r)
			}
			return rows.Err()
		}
		b := &pgx.Batch{}
		for _, group := range groups {
			g := group.items
			parts, ids, epochs, errs := make([]int16, len(g)), make([]pgtype.UUID, len(g)), make([]int64, len(g)), make([]*string, len(g))
			extra := make([]int32, len(g))
			for i, it := range g {
				parts[i], ids[i], epochs[i], errs[i] = it.ID.Partition, pgUUID(it.ID.UUID), it.Epoch, nullIfEmpty(it.Error)
				extra[i] = int32(waits[it.ID])
			}
			args := []any{parts, ids, epochs, errs, string(kind.attemptOutcome), kind.bumpEpoch, kind.backoff, force, string(kind.leaseEvent)}
			if !dist {
				// One statement for all, outside any batch.
				rows, err := db.Query(ctx, requeueSQL, append(args, extra)...)
				if err != nil {
					return err
				}
				defer rows.Close()
				return scan(rows)
			}
			b.Queue(requeueRoutedSQL, append(args, group.parts, extra)...).Query(scan)
		}
		return db.SendBatch(ctx, b).Close()
	})
	return out, err
}
