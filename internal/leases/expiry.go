package leases

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
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

// ExpireLapsed ends the attempts of those leases that are still held and
// lapsed or timed out (re-checked under the row lock), in one transaction:
// retried after backoff when attempts remain, else expired. It reports
// what it did, and the executions it ended or retried (nothing for a lease
// renewed or moved on since).
func ExpireLapsed(ctx context.Context, db store.DB, held []store.LeaseRef) (Expired, []ffdtype.ExecutionID, error) {
	var ended []ffdtype.ExecutionID
	res, err := expireSelected(ctx, db, func(tx pgx.Tx) ([]store.Lapsed, error) {
		found, err := store.LockLapsed(ctx, tx, held)
		ended = ended[:0]
		for _, l := range found {
			ended = append(ended, l.ID)
		}
		return found, err
	})
	if err != nil {
		return Expired{}, nil, wrap(fmt.Sprintf("expire %d leases", len(held)), err)
	}
	return res, ended, nil
}

// SweepLapsed expires up to limit lapsed leases and timed-out attempts,
// skipping rows other sweepers hold.
func SweepLapsed(ctx context.Context, db store.DB, limit int) (Expired, error) {
	res, err := expireSelected(ctx, db, func(tx pgx.Tx) ([]store.Lapsed, error) {
		return store.LockLapsedBatch(ctx, tx, limit)
	})
	return res, wrap("sweep lapsed leases", err)
}

// expireSelected locks the lapsed rows lock selects and ends their
// attempts, in one transaction.
func expireSelected(ctx context.Context, db store.DB, lock func(tx pgx.Tx) ([]store.Lapsed, error)) (Expired, error) {
	var res Expired
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		found, err := lock(tx)
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

func expireLocked(ctx context.Context, tx pgx.Tx, found []store.Lapsed) (Expired, error) {
	var retry []store.RequeueItem
	var end []store.Termination
	var res Expired
	for _, l := range found {
		msg := errAttemptTimeout
		if l.LeaseLapsed {
			msg = errLeaseLapsed
		}
		switch {
		case l.Attempt < l.MaxAttempts && l.LeaseLapsed:
			res.LapsedRetried++
		case l.Attempt < l.MaxAttempts:
			res.TimeoutRetried++
		case l.LeaseLapsed:
			res.LapsedExpired++
		default:
			res.TimeoutExpired++
		}
		if l.Attempt < l.MaxAttempts {
			retry = append(retry, store.RequeueItem{ID: l.ID, Epoch: l.Epoch, Error: msg})
		} else {
			end = append(end, store.Termination{ID: l.ID, Epoch: l.Epoch, State: ffdtype.StateExpired, Error: msg})
		}
	}
	rq, err := store.Requeue(ctx, tx, store.RequeueTimedOut, false, retry)
	if err != nil {
		return Expired{}, err
	}
	ended, err := store.Terminate(ctx, tx, end)
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
func ExpireDeadline(ctx context.Context, db store.DB, id ffdtype.ExecutionID) (bool, error) {
	n, err := expireDeadlines(ctx, db, func(tx pgx.Tx) ([]ffdtype.ExecutionID, error) {
		return store.LockDeadlinePassed(ctx, tx, id)
	})
	return n > 0, wrap("expire deadline of "+id.String(), err)
}

// SweepDeadlines ends up to limit executions whose deadline has passed.
func SweepDeadlines(ctx context.Context, db store.DB, limit int) (int, error) {
	n, err := expireDeadlines(ctx, db, func(tx pgx.Tx) ([]ffdtype.ExecutionID, error) {
		return store.LockDeadlinesPassed(ctx, tx, limit)
	})
	return n, wrap("sweep deadlines", err)
}

func expireDeadlines(ctx context.Context, db store.DB, lock func(tx pgx.Tx) ([]ffdtype.ExecutionID, error)) (int, error) {
	var n int
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		ids, err := lock(tx)
		if err != nil {
			return err
		}
		end := make([]store.Termination, len(ids))
		for i, id := range ids {
			end[i] = store.Termination{ID: id, State: ffdtype.StateExpired, Error: errDeadline}
		}
		ended, err := store.Terminate(ctx, tx, end)
		n = len(ended)
		return err
	})
	return n, err
}
