package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// Never is the run_at of a signal wait without a timeout: a time no
// clock reaches, but one every driver reads (unlike 'infinity').
var Never = time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)

// Wait kinds (ff_execution.wait_for).
const (
	WaitSleep  = "sleep"
	WaitSignal = "signal"
)

// A step's wait and the signals sent to its flow or execution meet
// under one transaction-scoped advisory lock, taken first by both: the
// wait's anchor (its flow, or a solo execution itself). Whichever
// commits second sees the other: a signal sent while the wait is being
// recorded is found by the wait, a wait recorded while the signal is
// being sent is woken by it. No row lock is held before it, so it adds
// nothing to the row lock order (docs/design.md, section 9). On a
// distributed Postgres it is taken on the coordinator, where both run.
const anchorLockSQL = `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 20251126))`

// anchorOf is the uuid whose advisory lock serializes x's waits and the
// signals to it.
func anchorOf(id ffdtype.ExecutionID, flowID *uuid.UUID) uuid.UUID {
	if flowID != nil {
		return *flowID
	}
	return id.UUID
}

// suspendSQL ends the attempt held at an epoch ($3) in a wait: back to
// pending with run_at at the wait's end (the time $6, or $8 seconds from
// now; Never when neither), the wait in ff_wait (its waits counted
// there: they do not count against max_attempts), the attempt written
// to ff_attempt as 'waited', and the lease event 'suspended'. The holder
// gives the lease up itself: the epoch stays. Rows are locked in the
// global order: the execution, then its ff_wait row.
var suspendSQL = `
WITH locked AS (
	SELECT e.partition_key, e.execution_id, e.attempt_worker, e.attempt_started_at,
		coalesce($6::timestamptz, ` + nowPlus("$8::float8") + `) AS wait_until
	FROM ff_execution e
	WHERE e.partition_key = $1 AND e.execution_id = $2 AND ` + isRunning("e.") + ` AND e.lease_epoch = $3
	FOR NO KEY UPDATE
), upd AS (
	UPDATE ff_execution e SET
		state = 'pending', run_at = coalesce(l.wait_until, $7::timestamptz),
		lease_owner = NULL, lease_expires_at = NULL, attempt_deadline_at = NULL,
		attempt_worker = NULL, attempt_started_at = NULL
	FROM locked l
	WHERE e.partition_key = $1 AND e.execution_id = $2
		AND e.partition_key = l.partition_key AND e.execution_id = l.execution_id
	RETURNING e.partition_key, e.execution_id, e.flow_id, e.attempt, e.lease_epoch, e.run_at, e.lane, l.wait_until,
		l.attempt_worker, l.attempt_started_at
), wait AS (
	INSERT INTO ff_wait (partition_key, execution_id, flow_id, waits, wait_for, wait_signal, wait_until, wait_attempt)
	SELECT partition_key, execution_id, flow_id, 1, $4, $5, wait_until, attempt FROM upd
	ON CONFLICT (partition_key, execution_id) DO UPDATE SET
		waits = ff_wait.waits + 1, flow_id = EXCLUDED.flow_id, wait_for = EXCLUDED.wait_for,
		wait_signal = EXCLUDED.wait_signal, wait_until = EXCLUDED.wait_until,
		wait_attempt = EXCLUDED.wait_attempt, woken_by = NULL, began_at = EXCLUDED.began_at
), att AS (
	INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome)
	SELECT partition_key, execution_id, attempt, lease_epoch, attempt_worker, attempt_started_at, now(), 'waited'
	FROM upd
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
	SELECT partition_key, execution_id, lease_epoch, attempt, attempt_worker, 'suspended', wait_until
	FROM upd
)
SELECT attempt, run_at, lane FROM upd`

// takeSignalSQL ends a signal wait just begun with the oldest signal
// already sent for it, if any: to the execution, or to its flow ($4).
const takeSignalSQL = `
WITH sig AS (
	SELECT s.signal_id FROM ff_signal s
	WHERE s.partition_key = $1 AND s.name = $3 AND s.consumed_by IS NULL
		AND (s.execution_id = $2 OR (s.execution_id IS NULL AND s.flow_id = $4))
	ORDER BY s.signal_id
	LIMIT 1
	FOR UPDATE
), used AS (
	UPDATE ff_signal s SET consumed_by = $2, consumed_at = now()
	FROM sig WHERE s.partition_key = $1 AND s.signal_id = sig.signal_id
	RETURNING s.signal_id
), woke AS (
	UPDATE ff_execution e SET run_at = now()
	FROM used
	WHERE e.partition_key = $1 AND e.execution_id = $2
	RETURNING e.partition_key, e.execution_id, e.lease_epoch, e.attempt, used.signal_id
), wk AS (
	UPDATE ff_wait w SET woken_by = woke.signal_id
	FROM woke
	WHERE w.partition_key = $1 AND w.execution_id = $2
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
	SELECT partition_key, execution_id, lease_epoch, attempt, '', 'signalled' FROM woke
)
SELECT count(*) FROM woke`

// Suspension is a wait to record: the attempt held at Epoch ends, and
// the execution waits For (a sleep) or for a Signal, until Until, or
// Seconds from the database's now (neither: a signal wait without
// timeout).
type Suspension struct {
	ID      ffdtype.ExecutionID
	Epoch   int64
	FlowID  *uuid.UUID // the execution's flow, nil for a solo one
	For     string     // WaitSleep or WaitSignal
	Signal  string
	Until   *time.Time
	Seconds *float64
}

// Waited is a recorded wait: the attempt that ended, and when the
// execution becomes claimable (now, when a signal was already waiting).
type Waited struct {
	Attempt int
	RunAt   time.Time
	Woken   bool
}

// Suspend records s, fenced on its epoch; ok is false when the lease is
// no longer held. A signal wait takes a signal already sent for it, and
// the execution is then claimable at once.
func Suspend(ctx context.Context, db DB, s Suspension) (out Waited, ok bool, err error) {
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		ok = false
		if _, err := tx.Exec(ctx, anchorLockSQL, anchorOf(s.ID, s.FlowID)); err != nil {
			return err
		}
		var signal *string
		if s.For == WaitSignal {
			signal = &s.Signal
		}
		var lane string
		err := tx.QueryRow(ctx, suspendSQL, s.ID.Partition, pgUUID(s.ID.UUID), s.Epoch, s.For, signal, s.Until, Never, s.Seconds).
			Scan(&out.Attempt, &out.RunAt, &lane)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		ok = true
		n := &Notices{}
		if s.For == WaitSignal {
			var woke int
			if err := tx.QueryRow(ctx, takeSignalSQL, s.ID.Partition, pgUUID(s.ID.UUID), s.Signal, pgUUIDOrNull(s.FlowID)).Scan(&woke); err != nil {
				return fmt.Errorf("take a signal already sent: %w", err)
			}
			if out.Woken = woke > 0; out.Woken {
				out.RunAt = time.Now()
				n.Ready(lane)
			}
		}
		n.LeaseEvents(s.ID.Partition)
		if !out.Woken && out.RunAt.Before(Never) {
			n.due(out.RunAt)
		}
		return n.Send(ctx, tx)
	})
	if err != nil {
		return Waited{}, false, wrap("suspend execution "+s.ID.String(), unroutable(db, err))
	}
	return out, ok, nil
}

// sendSignalSQL records a signal and ends, with it, the wait of the
// first execution that waits for it: the execution named ($4), or the
// oldest member of the flow ($3) that waits (a member's own wait takes
// a signal sent to its flow too). A wait already at its end (run_at
// passed: it timed out, or its sleep is over) is not woken by it: the
// signal is kept for a later wait.
const sendSignalSQL = `
WITH w AS (
	SELECT e.partition_key, e.execution_id FROM ff_wait w
	JOIN ff_execution e ON e.partition_key = w.partition_key AND e.execution_id = w.execution_id
	WHERE w.partition_key = $1 AND e.partition_key = $1 AND (w.execution_id = $4 OR ($4 IS NULL AND w.flow_id = $3))
		AND w.wait_signal = $5 AND w.woken_by IS NULL
		AND e.state = 'pending' AND e.attempt = w.wait_attempt AND e.run_at > now()
	ORDER BY w.execution_id
	LIMIT 1
	FOR NO KEY UPDATE OF e
), woke AS (
	UPDATE ff_execution e SET run_at = now()
	FROM w WHERE e.partition_key = $1 AND e.partition_key = w.partition_key AND e.execution_id = w.execution_id
	RETURNING e.partition_key, e.execution_id, e.lease_epoch, e.attempt, e.lane
), wk AS (
	UPDATE ff_wait x SET woken_by = $2
	FROM woke WHERE x.partition_key = $1 AND x.execution_id = woke.execution_id
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
	SELECT partition_key, execution_id, lease_epoch, attempt, '', 'signalled' FROM woke
), sig AS (
	INSERT INTO ff_signal (partition_key, signal_id, flow_id, execution_id, name, payload, consumed_by, consumed_at)
	SELECT $1, $2, $3, $4, $5, $6, (SELECT execution_id FROM woke),
		CASE WHEN EXISTS (SELECT 1 FROM woke) THEN now() END
	RETURNING sent_at
)
SELECT (SELECT sent_at FROM sig), (SELECT execution_id FROM woke), (SELECT lane FROM woke)`

// NewSignal is a signal to send: to an execution (Execution set; FlowID
// its flow, if any) or to a flow.
type NewSignal struct {
	ID        uuid.UUID
	Partition int16
	FlowID    *uuid.UUID
	Execution *uuid.UUID
	Name      string
	Payload   []byte
}

// SendSignal records s and wakes the wait it ends, if one waits for it;
// woke is that execution.
func SendSignal(ctx context.Context, db DB, s NewSignal) (sentAt time.Time, woke *uuid.UUID, err error) {
	anchor := s.FlowID
	if anchor == nil {
		anchor = s.Execution
	}
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, anchorLockSQL, *anchor); err != nil {
			return err
		}
		var lane *string
		var w pgtype.UUID
		if err := tx.QueryRow(ctx, sendSignalSQL, s.Partition, pgUUID(s.ID), pgUUIDOrNull(s.FlowID), pgUUIDOrNull(s.Execution),
			s.Name, s.Payload).Scan(&sentAt, &w, &lane); err != nil {
			return err
		}
		woke = nil
		if !w.Valid {
			return nil
		}
		u := uuid.UUID(w.Bytes)
		woke = &u
		n := &Notices{}
		n.Ready(*lane)
		n.LeaseEvents(s.Partition)
		return n.Send(ctx, tx)
	})
	if err != nil {
		return time.Time{}, nil, wrap("send signal "+s.Name, unroutable(db, err))
	}
	return sentAt, woke, nil
}

// matchSignalsSQL finds waits that a signal already sent should have
// ended: a lost race (the wait and the signal each committed without
// seeing the other) cannot happen under the anchor lock, but a signal
// sent by a binary older than the waits, or a wake rolled back, can
// leave one; the daemon's sweep calls it as the fallback. It starts
// from the signals kept unconsumed, which are few: most are taken as
// they are sent.
const matchSignalsSQL = `
SELECT DISTINCT w.partition_key, w.execution_id, w.flow_id, w.wait_signal
FROM ff_signal s
JOIN ff_wait w ON w.partition_key = s.partition_key AND w.wait_signal = s.name AND w.woken_by IS NULL
	AND (w.execution_id = s.execution_id OR (s.execution_id IS NULL AND w.flow_id = s.flow_id))
JOIN ff_execution e ON e.partition_key = w.partition_key AND e.execution_id = w.execution_id
WHERE s.consumed_by IS NULL AND e.state = 'pending' AND e.attempt = w.wait_attempt AND e.run_at > now()
LIMIT $1`

// MatchSignals ends, with the signal it waits for, each of at most limit
// waits that missed a signal already sent, and returns how many it
// woke.
func MatchSignals(ctx context.Context, db DB, limit int) (int, error) {
	rows, err := db.Query(ctx, matchSignalsSQL, limit)
	if err != nil {
		return 0, wrap("find waits with a signal sent", unroutable(db, err))
	}
	type found struct {
		id     ffdtype.ExecutionID
		flow   *uuid.UUID
		signal string
	}
	fs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
		var f found
		var flow pgtype.UUID
		err := r.Scan(&f.id.Partition, &f.id.UUID, &flow, &f.signal)
		if flow.Valid {
			u := uuid.UUID(flow.Bytes)
			f.flow = &u
		}
		return f, err
	})
	if err != nil {
		return 0, wrap("find waits with a signal sent", err)
	}
	woken := 0
	for _, f := range fs {
		err := InTx(ctx, db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, anchorLockSQL, anchorOf(f.id, f.flow)); err != nil {
				return err
			}
			// Still waiting, at its current attempt, and not yet due?
			var lane *string
			err := tx.QueryRow(ctx, `SELECT e.lane FROM ff_execution e
				JOIN ff_wait w ON w.partition_key = e.partition_key AND w.execution_id = e.execution_id
				WHERE e.partition_key = $1 AND e.execution_id = $2 AND w.partition_key = $1
					AND e.state = 'pending' AND w.wait_signal = $3
					AND w.woken_by IS NULL AND w.wait_attempt = e.attempt AND e.run_at > now()`,
				f.id.Partition, pgUUID(f.id.UUID), f.signal).Scan(&lane)
			if errors.Is(err, pgx.ErrNoRows) {
				return nil
			}
			if err != nil {
				return err
			}
			var woke int
			if err := tx.QueryRow(ctx, takeSignalSQL, f.id.Partition, pgUUID(f.id.UUID), f.signal, pgUUIDOrNull(f.flow)).Scan(&woke); err != nil {
				return err
			}
			if woke == 0 {
				return nil
			}
			woken++
			n := &Notices{}
			n.Ready(*lane)
			n.LeaseEvents(f.id.Partition)
			return n.Send(ctx, tx)
		})
		if err != nil {
			return woken, wrap("wake execution "+f.id.String()+" with its signal", unroutable(db, err))
		}
	}
	return woken, nil
}

// wakeSQL reads what an execution last waited for and what ended it.
const wakeSQL = `
SELECT w.wait_for, w.wait_signal, w.wait_until, w.wait_attempt, w.waits, e.attempt, e.state, e.run_at > now(),
	s.signal_id, s.name, s.payload, s.sent_at, s.flow_id, s.execution_id
FROM ff_execution e
LEFT JOIN ff_wait w ON w.partition_key = e.partition_key AND w.execution_id = e.execution_id
LEFT JOIN ff_signal s ON s.partition_key = e.partition_key AND s.signal_id = w.woken_by
WHERE e.partition_key = $1 AND e.execution_id = $2`

// ReadWake reads what x last waited for and how that wait ended; nil
// when it never waited.
func ReadWake(ctx context.Context, db DB, id ffdtype.ExecutionID) (*ffdtype.Wake, error) {
	var (
		waitFor, signal     *string
		until               *time.Time
		waitAttempt, waits  *int
		attempt             int
		state               ffdtype.State
		notDue              bool
		sigID, sigFlow, sEx pgtype.UUID
		sigName             *string
		payload             []byte
		sentAt              *time.Time
	)
	err := db.QueryRow(ctx, wakeSQL, id.Partition, pgUUID(id.UUID)).Scan(&waitFor, &signal, &until, &waitAttempt, &waits, &attempt, &state, &notDue,
		&sigID, &sigName, &payload, &sentAt, &sigFlow, &sEx)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
	}
	if err != nil {
		return nil, wrap("read the wake of "+id.String(), unroutable(db, err))
	}
	if waitFor == nil {
		return nil, nil
	}
	w := &ffdtype.Wake{For: *waitFor, Attempt: *waitAttempt, Waits: *waits, Until: until}
	if signal != nil {
		w.Signal = *signal
	}
	// Waiting: pending at the attempt that began the wait, and neither
	// woken by a signal nor due (a wait woken but not yet claimed has
	// ended).
	w.Waiting = state == ffdtype.StatePending && *waitAttempt == attempt && !sigID.Valid && notDue
	switch {
	case sigID.Valid:
		w.Reason = ffdtype.WokenBySignal
		w.Received = &ffdtype.Signal{ID: uuid.UUID(sigID.Bytes), Name: *sigName, Payload: payload, SentAt: *sentAt,
			ConsumedBy: &id}
		if sigFlow.Valid {
			u := uuid.UUID(sigFlow.Bytes)
			w.Received.FlowID = &u
		}
		if sEx.Valid {
			w.Received.Execution = &ffdtype.ExecutionID{Partition: id.Partition, UUID: uuid.UUID(sEx.Bytes)}
		}
	case w.Waiting:
		w.Reason = ""
	case *waitFor == WaitSleep:
		w.Reason = ffdtype.WokenByTimer
	default:
		w.Reason = ffdtype.WokenByTimeout
	}
	return w, nil
}

// listSignalsSQL reads the signals sent to a flow or an execution.
const listSignalsSQL = `
SELECT s.signal_id, s.name, s.payload, s.sent_at, s.flow_id, s.execution_id, s.consumed_by, s.consumed_at
FROM ff_signal s
WHERE s.partition_key = $1 AND (s.flow_id = $2 OR s.execution_id = $2)
ORDER BY s.signal_id
LIMIT $3`

// ListSignals reads the signals sent to a flow (its members' included)
// or to an execution, oldest first, at most limit.
func ListSignals(ctx context.Context, db DB, partition int16, target uuid.UUID, limit int) ([]ffdtype.Signal, error) {
	rows, err := db.Query(ctx, listSignalsSQL, partition, pgUUID(target), limit)
	if err != nil {
		return nil, wrap("list signals of "+target.String(), unroutable(db, err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ffdtype.Signal, error) {
		var s ffdtype.Signal
		var flow, ex, by pgtype.UUID
		if err := r.Scan(&s.ID, &s.Name, &s.Payload, &s.SentAt, &flow, &ex, &by, &s.ConsumedAt); err != nil {
			return s, err
		}
		if flow.Valid {
			u := uuid.UUID(flow.Bytes)
			s.FlowID = &u
		}
		if ex.Valid {
			s.Execution = &ffdtype.ExecutionID{Partition: partition, UUID: uuid.UUID(ex.Bytes)}
		}
		if by.Valid {
			s.ConsumedBy = &ffdtype.ExecutionID{Partition: partition, UUID: uuid.UUID(by.Bytes)}
		}
		return s, nil
	})
	return out, wrap("list signals of "+target.String(), err)
}
