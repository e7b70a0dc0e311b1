package store

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
)

// Debounce is a create's debounce (ffdtype.Debounce, checked).
type Debounce struct {
	Key             string
	Window, MaxWait time.Duration
	Leading         bool
}

// openWindowSQL takes the key's window row, locked: a new one naming the
// execution about to be created ($4), or the one there. Concurrent
// creates of the key wait here for each other. fresh says the row is new.
const openWindowSQL = `
INSERT INTO ff_debounce AS d (partition_key, namespace, debounce_key, execution_id, first_at, until, folds)
VALUES ($1, $2, $3, $4, now(), CASE WHEN $5::boolean THEN now() + $6::bigint * interval '1 microsecond' END, 1)
ON CONFLICT (partition_key, namespace, debounce_key) DO UPDATE SET folds = d.folds
RETURNING d.execution_id, d.first_at, d.execution_id = $4 AS fresh, coalesce(d.until > now(), false) AS open`

// foldTrailingSQL folds a create into the window's execution while it
// has not started: the payload is the new one, and the run waits the
// window again, no later than max wait ($5, 0: none) after the first
// create ($6). An execution claimed, or back from a failed attempt, is
// not folded into: its window is over.
const foldTrailingSQL = `
UPDATE ff_execution e SET payload = $3,
	run_at = CASE WHEN $5::bigint > 0
		THEN least(now() + $4::bigint * interval '1 microsecond', $6::timestamptz + $5::bigint * interval '1 microsecond')
		ELSE now() + $4::bigint * interval '1 microsecond' END
WHERE e.partition_key = $1 AND e.execution_id = $2 AND e.state = 'pending' AND e.attempt = 0
RETURNING ` + execColumns

// countFoldSQL counts a fold into the window.
const countFoldSQL = `UPDATE ff_debounce SET folds = folds + 1
WHERE partition_key = $1 AND namespace = $2 AND debounce_key = $3 RETURNING folds`

// newWindowSQL starts a window on the execution just created.
const newWindowSQL = `UPDATE ff_debounce SET execution_id = $4, first_at = now(), folds = 1,
	until = CASE WHEN $5::boolean THEN now() + $6::bigint * interval '1 microsecond' END
WHERE partition_key = $1 AND namespace = $2 AND debounce_key = $3`

// InsertDebounced creates r, or folds it into the execution of its
// debounce key's window, in one transaction that holds the key's window
// row: it returns the execution and how many creates it now stands for
// (1: this one created it).
func InsertDebounced(ctx context.Context, db DB, r NewExecution) (x *ffdtype.Execution, folds int64, err error) {
	d := r.Debounce
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		pk := []any{r.ID.Partition, r.Namespace, d.Key}
		var held ffdtype.ExecutionID
		var firstAt time.Time
		var fresh, open bool
		held.Partition = r.ID.Partition
		if err := tx.QueryRow(ctx, openWindowSQL, append(pk, r.ID.UUID, d.Leading, micros(d.Window))...).
			Scan(&held.UUID, &firstAt, &fresh, &open); err != nil {
			return wrap("open debounce window "+d.Key, err)
		}
		if !fresh {
			var err error
			if x, err = fold(ctx, tx, r, held, firstAt, open); err != nil || x != nil {
				if err == nil {
					err = tx.QueryRow(ctx, countFoldSQL, pk...).Scan(&folds)
				}
				return wrap("fold into debounce window "+d.Key, err)
			}
			if _, err := tx.Exec(ctx, newWindowSQL, append(pk, r.ID.UUID, d.Leading, micros(d.Window))...); err != nil {
				return wrap("start debounce window "+d.Key, err)
			}
		}
		x, _, err = InsertExecution(ctx, tx, r)
		folds = 1
		return err
	})
	return x, folds, err
}

// fold folds r into the window's execution held, and returns it; nil
// when the window is over (a leading window past its end, a trailing
// one whose execution started).
func fold(ctx context.Context, tx pgx.Tx, r NewExecution, held ffdtype.ExecutionID, firstAt time.Time, open bool) (*ffdtype.Execution, error) {
	var x *ffdtype.Execution
	var err error
	if r.Debounce.Leading {
		if !open {
			return nil, nil
		}
		x, err = GetExecution(ctx, tx, held)
	} else {
		x, err = oneExecution(tx.Query(ctx, foldTrailingSQL, held.Partition, held.UUID, r.Payload,
			micros(r.Debounce.Window), micros(r.Debounce.MaxWait), firstAt))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return x, err
}

// deleteClosedWindowsSQL forgets the windows that are over: a leading
// one past its end, a trailing one whose execution started (or is gone),
// each at least a minute old. The age test is on the row itself, so a
// window restarted while this statement waited on its lock (its first_at
// now recent) is kept, whatever this statement's snapshot saw of its new
// execution.
const deleteClosedWindowsSQL = `
DELETE FROM ff_debounce d
WHERE d.first_at < now() - interval '1 minute'
	AND CASE WHEN d.until IS NOT NULL THEN d.until < now()
		ELSE NOT EXISTS (SELECT 1 FROM ff_execution e WHERE e.partition_key = d.partition_key
			AND e.execution_id = d.execution_id AND e.state = 'pending' AND e.attempt = 0) END`

// DeleteClosedDebounces forgets the debounce windows that are over.
func DeleteClosedDebounces(ctx context.Context, db DB) (int, error) {
	tag, err := db.Exec(ctx, deleteClosedWindowsSQL)
	if err != nil {
		return 0, wrap("delete closed debounce windows", err)
	}
	return int(tag.RowsAffected()), nil
}
