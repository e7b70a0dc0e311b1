package leases

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Errors recorded on attempts that ran out of time.
const (
	errLeaseLapsed    = "lease expired: no heartbeat within the lease TTL"
	errAttemptTimeout = "attempt timed out"
	errDeadline       = "deadline passed"
)

// Expired counts what an expiry pass did.
type Expired struct {
	Retried    int // back to pending after backoff
	Terminated int // ended as expired
	// By reason: the lease lapsed (no heartbeat), or the attempt ran longer
	// than its attempt timeout.
	LapsedRetried, LapsedExpired, TimeoutRetried, TimeoutExpired int
}

// lapsed is a running execution whose lease lapsed or whose attempt ran
// out of time, locked by the current transaction.
type lapsed struct {
	id                   ident.ExecutionID
	epoch                int64
	attempt, maxAttempts int
	leaseLapsed          bool
}

const lapsedColumns = `partition_key, execution_id, lease_epoch, attempt, max_attempts, lease_expires_at <= now()`

// ExpireLapsed ends the attempt of one execution if it is still running at
// epoch and its lease lapsed or its attempt timed out (re-checked under the
// row lock): retried after backoff when attempts remain, else expired.
// It reports what it did (nothing when the lease was renewed or moved on).
func ExpireLapsed(ctx context.Context, db store.DB, id ident.ExecutionID, epoch int64) (Expired, error) {
	res, err := expireSelected(ctx, db, `SELECT `+lapsedColumns+` FROM ff_execution
		WHERE partition_key = $1 AND execution_id = $2 AND state = 'running' AND lease_epoch = $3
			AND (lease_expires_at <= now() OR attempt_deadline_at <= now())
		FOR NO KEY UPDATE`, id.Partition, id.UUID, epoch)
	return res, wrap("expire lease of "+id.String(), err)
}

// SweepLapsed expires up to limit lapsed leases and timed-out attempts,
// skipping rows other sweepers hold.
func SweepLapsed(ctx context.Context, db store.DB, limit int) (Expired, error) {
	res, err := expireSelected(ctx, db, `SELECT `+lapsedColumns+` FROM ff_execution
		WHERE state = 'running' AND (lease_expires_at <= now() OR attempt_deadline_at <= now())
		ORDER BY partition_key, execution_id
		LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED`, limit)
	return res, wrap("sweep lapsed leases", err)
}

// expireSelected locks the lapsed rows the query selects and ends their
// attempts, in one transaction.
func expireSelected(ctx context.Context, db store.DB, sql string, args ...any) (Expired, error) {
	var res Expired
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sql, args...)
		if err != nil {
			return err
		}
		found, err := collectLapsed(rows)
		if err != nil {
			return err
		}
		res, err = expireLocked(ctx, tx, found)
		return err
	})
	if err != nil {
		return Expired{}, err
	}
	return res, nil
}

func collectLapsed(rows pgx.Rows) ([]lapsed, error) {
	defer rows.Close()
	var out []lapsed
	for rows.Next() {
		var l lapsed
		if err := rows.Scan(&l.id.Partition, &l.id.UUID, &l.epoch, &l.attempt, &l.maxAttempts, &l.leaseLapsed); err != nil {
			return nil, err
		}
		out = append(out, l)
	}
	return out, rows.Err()
}

func expireLocked(ctx context.Context, tx pgx.Tx, found []lapsed) (Expired, error) {
	var retry []requeueItem
	var end []Ending
	var res Expired
	for _, l := range found {
		msg := errAttemptTimeout
		if l.leaseLapsed {
			msg = errLeaseLapsed
		}
		switch {
		case l.attempt < l.maxAttempts && l.leaseLapsed:
			res.LapsedRetried++
		case l.attempt < l.maxAttempts:
			res.TimeoutRetried++
		case l.leaseLapsed:
			res.LapsedExpired++
		default:
			res.TimeoutExpired++
		}
		if l.attempt < l.maxAttempts {
			retry = append(retry, requeueItem{ID: l.id, Epoch: l.epoch, Error: msg})
		} else {
			end = append(end, Ending{ID: l.id, Epoch: l.epoch, State: store.StateExpired, Error: msg})
		}
	}
	rq, err := requeue(ctx, tx, requeueTimedOut, false, retry)
	if err != nil {
		return Expired{}, err
	}
	ended, err := Terminate(ctx, tx, end)
	if err != nil {
		return Expired{}, err
	}
	if len(rq) != len(retry) || len(ended) != len(end) {
		// The rows are locked by this transaction; a mismatch is a bug.
		return Expired{}, errors.New("expiry matched fewer rows than it locked")
	}
	res.Retried, res.Terminated = len(rq), len(ended)
	return res, nil
}

// ExpireDeadline ends one execution as expired if it is not terminal and
// its deadline has passed (re-checked under the row lock).
func ExpireDeadline(ctx context.Context, db store.DB, id ident.ExecutionID) (bool, error) {
	n, err := expireDeadlines(ctx, db, `partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID)
	return n > 0, wrap("expire deadline of "+id.String(), err)
}

// SweepDeadlines ends up to limit executions whose deadline has passed.
func SweepDeadlines(ctx context.Context, db store.DB, limit int) (int, error) {
	n, err := expireDeadlines(ctx, db, `true ORDER BY partition_key, execution_id LIMIT $1`, limit)
	return n, wrap("sweep deadlines", err)
}

func expireDeadlines(ctx context.Context, db store.DB, where string, args ...any) (int, error) {
	var n int
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT partition_key, execution_id FROM ff_execution
			WHERE deadline_at <= now() AND state IN ('blocked', 'pending', 'running') AND `+where+`
			FOR NO KEY UPDATE SKIP LOCKED`, args...)
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ident.ExecutionID, error) {
			var id ident.ExecutionID
			return id, r.Scan(&id.Partition, &id.UUID)
		})
		if err != nil {
			return err
		}
		end := make([]Ending, len(ids))
		for i, id := range ids {
			end[i] = Ending{ID: id, State: store.StateExpired, Error: errDeadline}
		}
		ended, err := Terminate(ctx, tx, end)
		n = len(ended)
		return err
	})
	return n, err
}
