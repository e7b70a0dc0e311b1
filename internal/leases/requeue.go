package leases

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// requeueKind is how a running attempt ends without ending the execution.
type requeueKind struct {
	attemptOutcome string // on ff_attempt
	leaseEvent     string // on ff_lease_event
	bumpEpoch      bool   // the holder is fenced (it did not give the lease up itself)
	backoff        bool   // run_at after backoff, else now
}

var (
	// The holder failed and a retry is allowed.
	requeueFailed = requeueKind{"failed", "released", false, true}
	// The holder failed but asked for an immediate retry (worker shutdown).
	requeueFailedNow = requeueKind{"failed", "released", false, false}
	// The lease lapsed or the attempt ran out of time; attempts remain.
	requeueTimedOut = requeueKind{"timed_out", "expired", true, true}
	// An operator took the lease away.
	requeueRevoked = requeueKind{"revoked", "revoked", true, false}
)

// backoffSQL is run_at after a failed attempt, computed in the database from
// the row's policy: min(base·multiplier^(attempt-1), max) ± jitter. The
// exponent is clamped so the double cannot overflow.
const backoffSQL = `now() + make_interval(secs => least(extract(epoch FROM e.backoff_max),
		extract(epoch FROM e.backoff_base) * power(e.backoff_multiplier, least(greatest(e.attempt - 1, 0), 60)))
	* (1 + e.backoff_jitter * (2 * random() - 1)))`

const requeueSQL = `
WITH input AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::bigint[], $4::text[])
		AS i(partition_key, execution_id, epoch, error)
), locked AS (
	SELECT e.partition_key, e.execution_id, i.epoch, i.error
	FROM ff_execution e
	JOIN input i ON i.partition_key = e.partition_key AND i.execution_id = e.execution_id
	WHERE e.state = 'running' AND e.lease_epoch = i.epoch
		AND ($8 OR e.attempt < e.max_attempts)
	ORDER BY e.partition_key, e.execution_id
	FOR NO KEY UPDATE OF e
), upd AS (
	UPDATE ff_execution e SET
		state = 'pending',
		run_at = CASE WHEN $7 THEN ` + backoffSQL + ` ELSE now() END,
		last_error = coalesce(l.error, e.last_error),
		lease_epoch = e.lease_epoch + CASE WHEN $6 THEN 1 ELSE 0 END,
		lease_owner = NULL, lease_expires_at = NULL, attempt_deadline_at = NULL
	FROM locked l
	WHERE e.partition_key = l.partition_key AND e.execution_id = l.execution_id
	RETURNING e.partition_key, e.execution_id, e.attempt, e.lease_epoch, e.run_at, l.epoch AS old_epoch, l.error
), att AS (
	UPDATE ff_attempt a SET ended_at = now(), outcome = $5, error = u.error
	FROM upd u
	WHERE a.partition_key = u.partition_key AND a.execution_id = u.execution_id AND a.attempt = u.attempt
	RETURNING a.partition_key, a.execution_id, a.worker
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
	SELECT u.partition_key, u.execution_id, u.old_epoch, u.attempt, a.worker, $9
	FROM upd u JOIN att a ON a.partition_key = u.partition_key AND a.execution_id = u.execution_id
)
SELECT partition_key, execution_id, attempt, lease_epoch, run_at FROM upd`

// Requeued is one execution put back to pending.
type Requeued struct {
	ID         ident.ExecutionID
	Attempt    int
	LeaseEpoch int64
	RunAt      time.Time
}

type requeueItem struct {
	ID    ident.ExecutionID
	Epoch int64
	Error string
}

// requeue puts running executions back to pending, fenced on their epoch.
// Unless force is set, only those with attempts left are requeued; the
// caller ends the others through Terminate.
func requeue(ctx context.Context, db store.DB, kind requeueKind, force bool, items []requeueItem) ([]Requeued, error) {
	if len(items) == 0 {
		return nil, nil
	}
	n := len(items)
	parts, ids, epochs, errs := make([]int16, n), make([]uuid.UUID, n), make([]int64, n), make([]*string, n)
	for i, it := range items {
		parts[i], ids[i], epochs[i], errs[i] = it.ID.Partition, it.ID.UUID, it.Epoch, nullIfEmpty(it.Error)
	}
	var out []Requeued
	err := store.WithRetry(ctx, db, func() error {
		out = out[:0]
		rows, err := db.Query(ctx, requeueSQL, parts, ids, epochs, errs,
			kind.attemptOutcome, kind.bumpEpoch, kind.backoff, force, kind.leaseEvent)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Requeued
			if err := rows.Scan(&r.ID.Partition, &r.ID.UUID, &r.Attempt, &r.LeaseEpoch, &r.RunAt); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, wrap(fmt.Sprintf("requeue %d executions (%s)", n, kind.attemptOutcome), err)
	}
	return out, nil
}

// Held names a lease: an execution and the epoch its holder claimed it at.
type Held struct {
	ID    ident.ExecutionID
	Epoch int64
}

// HandBack gives leases back because their holder is stopping: in one
// transaction, each execution with attempts left is pending again at once
// (no backoff, so another worker picks it up straight away) and each
// without is failed with msg. Items whose lease already moved on are left
// alone. It returns how many were requeued and how many failed.
func HandBack(ctx context.Context, db store.DB, held []Held, msg string) (requeued, failed int, err error) {
	if len(held) == 0 {
		return 0, 0, nil
	}
	msg = CleanText(msg, MaxErrorBytes)
	items := make([]requeueItem, len(held))
	ends := make([]Ending, len(held))
	for i, h := range held {
		if err := validateFence(h.ID, h.Epoch); err != nil {
			return 0, 0, err
		}
		items[i] = requeueItem{ID: h.ID, Epoch: h.Epoch, Error: msg}
		ends[i] = Ending{ID: h.ID, Epoch: h.Epoch, State: store.StateFailed, Error: msg}
	}
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		rq, err := requeue(ctx, tx, requeueFailedNow, false, items)
		if err != nil {
			return err
		}
		// Terminate is fenced on the epoch, which requeue left unchanged:
		// drop what was just requeued (now pending) so only the exhausted
		// ones are failed.
		back := make(map[ident.ExecutionID]bool, len(rq))
		for _, r := range rq {
			back[r.ID] = true
		}
		rest := ends[:0:0]
		for _, e := range ends {
			if !back[e.ID] {
				rest = append(rest, e)
			}
		}
		ended, err := Terminate(ctx, tx, rest)
		if err != nil {
			return err
		}
		requeued, failed = len(rq), len(ended)
		return nil
	})
	if err != nil {
		return 0, 0, wrap(fmt.Sprintf("hand back %d leases", len(held)), err)
	}
	return requeued, failed, nil
}
