package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
)

// A debounced create reads the transaction's time (now()) with its first
// statement and computes every later time from it here: a distributed
// Postgres allows no function but an immutable one in an UPDATE's SET,
// a CASE or a RETURNING list, and timestamptz + interval is not one.

// openWindowSQL takes the key's window row, locked: a new one naming the
// execution about to be created ($4), leading for $5 microseconds (NULL:
// trailing), or the one there. Concurrent creates of the key wait here
// for each other.
const openWindowSQL = `
INSERT INTO ff_debounce AS d (partition_key, namespace, debounce_key, execution_id, first_at, until, folds)
VALUES ($1, $2, $3, $4, now(), now() + $5::bigint * interval '1 microsecond', 1)
ON CONFLICT (partition_key, namespace, debounce_key) DO UPDATE SET folds = d.folds
RETURNING d.execution_id, d.first_at, d.until`

// foldTrailingSQL folds a create into the window's execution while it
// has not started: the payload is the new one, and it runs at $4. An
// execution claimed, or back from a failed attempt, is not folded into:
// its window is over.
const foldTrailingSQL = `
UPDATE ff_execution e SET payload = $3, run_at = $4
WHERE e.partition_key = $1 AND e.execution_id = $2 AND e.state = 'pending' AND e.attempt = 0
RETURNING ` + execColumns

// countFoldSQL counts a fold into the window.
const countFoldSQL = `UPDATE ff_debounce SET folds = folds + 1
WHERE partition_key = $1 AND namespace = $2 AND debounce_key = $3 RETURNING folds`

// newWindowSQL starts a window on the execution just created.
const newWindowSQL = `UPDATE ff_debounce SET execution_id = $4, first_at = $5, until = $6, folds = 1
WHERE partition_key = $1 AND namespace = $2 AND debounce_key = $3`

// window is the state of a key's window a debounced create found.
type window struct {
	now, firstAt time.Time
	until        *time.Time // a leading window's end
	held         ffdtype.ExecutionID
}

// InsertDebounced creates r, or folds it into the execution of its
// debounce key's window, in one transaction that holds the key's window
// row: it returns the execution and how many creates it now stands for
// (1: this one created it).
func InsertDebounced(ctx context.Context, db DB, r NewExecution) (x *ffdtype.Execution, folds int64, err error) {
	d := r.Debounce
	leading := d.Mode == ffdtype.DebounceLeading
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		pk := []any{r.ID.Partition, r.Namespace, d.Key}
		var lead *int64
		if leading {
			us := micros(d.Window)
			lead = &us
		}
		w := window{held: ffdtype.ExecutionID{Partition: r.ID.Partition}}
		b := &pgx.Batch{}
		b.Queue(`SELECT now()`).QueryRow(func(row pgx.Row) error { return row.Scan(&w.now) })
		b.Queue(openWindowSQL, append(pk, r.ID.UUID, lead)...).QueryRow(func(row pgx.Row) error {
			return row.Scan(&w.held.UUID, &w.firstAt, &w.until)
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return wrap("open debounce window "+d.Key, err)
		}
		if w.held.UUID != r.ID.UUID { // a window was there
			var err error
			if x, err = fold(ctx, tx, r, w); err != nil || x != nil {
				if err == nil {
					err = tx.QueryRow(ctx, countFoldSQL, pk...).Scan(&folds)
				}
				return wrap("fold into debounce window "+d.Key, err)
			}
			var until *time.Time
			if leading {
				end := w.now.Add(d.Window)
				until = &end
			}
			if _, err := tx.Exec(ctx, newWindowSQL, append(pk, r.ID.UUID, w.now, until)...); err != nil {
				return wrap("start debounce window "+d.Key, err)
			}
		}
		x, _, err = InsertExecution(ctx, tx, r)
		folds = 1
		return err
	})
	return x, folds, err
}

// fold folds r into the window's execution, and returns it; nil when the
// window is over (a leading window past its end, a trailing one whose
// execution started). A trailing fold runs the execution a window from
// now, no later than max wait after the window's first create.
func fold(ctx context.Context, tx pgx.Tx, r NewExecution, w window) (*ffdtype.Execution, error) {
	var x *ffdtype.Execution
	var err error
	if d := r.Debounce; d.Mode == ffdtype.DebounceLeading {
		if w.until == nil || !w.until.After(w.now) {
			return nil, nil
		}
		x, err = GetExecution(ctx, tx, w.held)
	} else {
		runAt := w.now.Add(d.Window)
		if latest := w.firstAt.Add(d.MaxWait); d.MaxWait > 0 && latest.Before(runAt) {
			runAt = latest
		}
		x, err = oneExecution(tx.Query(ctx, foldTrailingSQL, w.held.Partition, w.held.UUID, r.Payload, runAt))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return x, err
}

// deleteClosedWindowsSQL forgets the windows that are over: a leading
// one past its end, a trailing one whose execution started (or is gone),
// each at least a minute old ($2: the database's time a minute ago, $1:
// its time now; passed in, as a distributed Postgres takes no now() in
// such a test). The age test is on the row itself, so a window restarted
// while this statement waited on its lock (its first_at now recent) is
// kept, whatever this statement's snapshot saw of its new execution.
const deleteClosedWindowsSQL = `
DELETE FROM ff_debounce d
WHERE d.first_at < $2
	AND ((d.until IS NOT NULL AND d.until < $1)
		OR (d.until IS NULL AND NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.partition_key = d.partition_key
			AND e.execution_id = d.execution_id AND e.state = 'pending' AND e.attempt = 0)))`

// DeleteClosedDebounces forgets the debounce windows that are over.
func DeleteClosedDebounces(ctx context.Context, db DB) (int, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, wrap("read the time to forget closed debounce windows", err)
	}
	tag, err := db.Exec(ctx, deleteClosedWindowsSQL, now, now.Add(-time.Minute))
	if err != nil {
		return 0, wrap("delete closed debounce windows", err)
	}
	return int(tag.RowsAffected()), nil
}
