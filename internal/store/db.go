package store

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is what every statement runs on: a pool, a connection or a caller's
// transaction.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
}

// MaxRetries bounds the retries of a transaction that hit a serialization
// failure or a deadlock.
const MaxRetries = 10

// Retryable reports a transient concurrency failure: serialization_failure
// or deadlock_detected.
func Retryable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}

// IsLockTimeout reports a statement that gave up waiting for a lock
// (lock_not_available, 55P03: lock_timeout or NOWAIT).
func IsLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// IsStepTaken reports an insert that gave a flow member a step name
// another member of its flow already has (ff_execution_flow_step).
func IsStepTaken(err error) bool {
	return refusedBy(err, "23505", "ff_execution_flow_step")
}

// constraintInMessage finds the constraint an error message names.
var constraintInMessage = regexp.MustCompile(`constraint "([^"]+)"`)

// refusedBy reports err as Postgres's error code refusing a row by one
// of the constraints named. On a distributed Postgres a shard's
// constraint carries the shard's id (ff_execution_rerun_102113), and
// that is the name the error gives.
func refusedBy(err error, code string, names ...string) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != code {
		return false
	}
	got := pgErr.ConstraintName
	if got == "" {
		// A distributed Postgres passing a shard's error on may keep
		// the constraint's name in the message alone.
		if m := constraintInMessage.FindStringSubmatch(pgErr.Message); m != nil {
			got = m[1]
		}
	}
	if i := strings.LastIndexByte(got, '_'); i > 0 && i < len(got)-1 && strings.Trim(got[i+1:], "0123456789") == "" {
		if slices.Contains(names, got[:i]) {
			return true
		}
	}
	return slices.Contains(names, got)
}

// InTx runs fn in a transaction on db (a savepoint when db is itself a
// transaction) and commits. When it owns the transaction it retries fn on
// serialization failures and deadlocks, so these never surface as
// anything else (in particular never as a lost lease).
func InTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	return WithRetry(ctx, db, func() error { return inTx(ctx, db, fn) })
}

// InTxOnce is InTx without its retries: for a transaction whose fn has
// effects outside it that must not be repeated on the caller's behalf
// (an outbox consumer's handler). Its rollback, too, keeps the
// connection when ctx has ended.
func InTxOnce(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, db, fn)
}

// inTx is pgx.BeginFunc but for its rollback, which runs on a context of
// its own (rollbackContext): BeginFunc rolls back on the caller's, and
// when that has ended (the deadline that failed the transaction, most
// often) the rollback fails and pgx closes the connection. Under load
// every transaction cut by its deadline then cost the pool its
// connection and the server a new session, whose first statements run
// slower (on a distributed Postgres, with the node's metadata still to
// load), so more of them would hit their deadlines.
func inTx(ctx context.Context, db DB, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return err
	}
	committing := false
	defer func() {
		if !committing { // fn failed or panicked; a commit, failed or not, ends tx itself
			rollback(ctx, tx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	committing = true
	return tx.Commit(ctx)
}

// rollbackTimeout bounds a rollback on its own context: a server that
// does not answer within it has the connection closed after all.
const rollbackTimeout = 5 * time.Second

// rollbackContext is the context a rollback runs on: ctx's values, not
// its end, bounded by rollbackTimeout.
func rollbackContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
}

// rollback ends tx if it is still open; a failure leaves pgx to close
// the connection, as it does.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := rollbackContext(ctx)
	defer cancel()
	_ = tx.Rollback(rctx)
}

// pipelinedTx runs fn in a transaction of its own whose BEGIN goes in
// fn's first batch and whose COMMIT in its last: a transaction of two
// batches is two round trips, not four. fn sends its first batch with
// first and its last with last (the same batch may be both). An error
// rolls the transaction back; db must not be a caller's transaction.
func pipelinedTx(ctx context.Context, db DB, fn func(first, last func(*pgx.Batch) error) error) error {
	conn := db
	if p, ok := db.(*pgxpool.Pool); ok {
		c, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		// A connection left inside a transaction is closed, not reused.
		defer c.Release()
		conn = c
	}
	begun := false
	send := func(b *pgx.Batch, begin, commit bool) error {
		if begin {
			b.QueuedQueries = append([]*pgx.QueuedQuery{{SQL: "BEGIN"}}, b.QueuedQueries...)
			begun = true
		}
		if commit {
			b.Queue("COMMIT")
		}
		return conn.SendBatch(ctx, b).Close()
	}
	err := fn(func(b *pgx.Batch) error { return send(b, true, false) },
		func(b *pgx.Batch) error { return send(b, !begun, true) })
	if err != nil && begun {
		// Best effort: on a broken connection the release closes it.
		rctx, cancel := rollbackContext(ctx)
		_, _ = conn.Exec(rctx, "ROLLBACK")
		cancel()
	}
	return err
}

// WithRetry runs fn, again on a serialization failure or deadlock, unless
// db is a caller's transaction (which such an error has aborted).
func WithRetry(ctx context.Context, db DB, fn func() error) error {
	callerTx := inCallerTx(db)
	for try := 0; ; try++ {
		err := fn()
		if err == nil || callerTx || !Retryable(err) || try >= MaxRetries {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(1+try) * 2 * time.Millisecond):
		}
	}
}

// inCallerTx reports whether db is a transaction the caller owns (and so
// the caller's to retry, and the place where no setting may outlive a
// statement).
func inCallerTx(db DB) bool {
	_, ok := db.(pgx.Tx)
	return ok
}

// wrap says what was being done when err happened.
func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

// pgUUID is u as pgx encodes it directly. A uuid.UUID argument goes
// through its driver.Valuer instead: formatted as text, refused by the
// binary encoder (which formats an error), and parsed back, 1.7 µs a
// value against 0.07 µs; in a COPY of a thousand rows or a batch's id
// array that is most of the client's encoding work.
func pgUUID(u uuid.UUID) pgtype.UUID { return pgtype.UUID{Bytes: u, Valid: true} }

// pgUUIDs is pgUUID of each of us: an id array's argument.
func pgUUIDs(us []uuid.UUID) []pgtype.UUID {
	out := make([]pgtype.UUID, len(us))
	for i, u := range us {
		out[i] = pgUUID(u)
	}
	return out
}

// collectUUIDs reads a one-column result of ids. Scanned into a
// uuid.UUID, each would be formatted as text and parsed back (its
// sql.Scanner), as pgUUID explains for arguments.
func collectUUIDs(rows pgx.Rows) ([]uuid.UUID, error) {
	ps, err := pgx.CollectRows(rows, pgx.RowTo[pgtype.UUID])
	if err != nil {
		return nil, err
	}
	out := make([]uuid.UUID, len(ps))
	for i, p := range ps {
		if !p.Valid {
			return nil, fmt.Errorf("id %d of %d is NULL", i+1, len(ps))
		}
		out[i] = p.Bytes
	}
	return out, nil
}

// pgUUIDOrNull is pgUUID of *u, or NULL.
func pgUUIDOrNull(u *uuid.UUID) pgtype.UUID {
	if u == nil {
		return pgtype.UUID{}
	}
	return pgUUID(*u)
}
