package outbox

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxBatch bounds one read.
const MaxBatch = 10000

// The protocol of docs/design.md section 7, per table. $1,$2 is the cursor; only
// transactions below the snapshot's xmin are read, so no event can later
// appear behind the cursor.
const (
	completionSelect = `SELECT 'completion'::text AS stream, event_id, txid::text AS txid_text, partition_key,
		execution_id, flow_id, occurred_at, attempt, outcome, namespace, dispatched_at, NULL::text AS event_type,
		NULL::bigint AS lease_epoch, NULL::text AS worker, NULL::timestamptz AS lease_expires_at, txid AS tx
	FROM ff_completion_event
	WHERE (txid, event_id) > ($1::text::xid8, $2::bigint) AND txid < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY txid, event_id LIMIT $3`
	leaseSelect = `SELECT 'lease'::text AS stream, event_id, txid::text AS txid_text, partition_key,
		execution_id, NULL::uuid AS flow_id, occurred_at, attempt, NULL::text AS outcome, NULL::text AS namespace,
		NULL::timestamptz AS dispatched_at, event_type, lease_epoch, worker, lease_expires_at, txid AS tx
	FROM ff_lease_event
	WHERE (txid, event_id) > ($1::text::xid8, $2::bigint) AND txid < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY txid, event_id LIMIT $3`
	eventColumns = `stream, event_id, txid_text, partition_key, execution_id, flow_id, occurred_at, attempt, outcome,
		namespace, dispatched_at, event_type, lease_epoch, worker, lease_expires_at`
)

func readSQL(s store.Stream) string {
	switch s {
	case store.StreamCompletion:
		return `SELECT ` + eventColumns + ` FROM (` + completionSelect + `) q ORDER BY tx, event_id`
	case store.StreamLease:
		return `SELECT ` + eventColumns + ` FROM (` + leaseSelect + `) q ORDER BY tx, event_id`
	}
	// Each side is already limited and ordered; the merge keeps the first
	// $3 of their union.
	return `SELECT ` + eventColumns + ` FROM ((` + completionSelect + `) UNION ALL (` + leaseSelect + `)) q
		ORDER BY tx, event_id LIMIT $3`
}

// Read returns up to limit committed events after cursor, in (txid,
// event_id) order: the protocol of docs/design.md section 7.
func Read(ctx context.Context, db store.DB, s store.Stream, after Cursor, limit int) ([]Event, error) {
	if _, err := ParseStream(string(s)); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxBatch {
		return nil, fault.Invalid(fault.KindOutOfRange, "limit", strconv.Itoa(limit), fmt.Sprintf("want 1..%d", MaxBatch))
	}
	rows, err := db.Query(ctx, readSQL(s), strconv.FormatUint(after.TxID, 10), after.EventID, limit)
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", s, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", s, err)
	}
	return events, nil
}

func scanEvent(r pgx.CollectableRow) (Event, error) {
	var (
		e                           Event
		stream, txid                string
		exec, flow                  *uuid.UUID
		outcome, ns, evType, worker *string
		epoch                       *int64
	)
	err := r.Scan(&stream, &e.EventID, &txid, &e.PartitionKey, &exec, &flow, &e.OccurredAt, &e.Attempt,
		&outcome, &ns, &e.DispatchedAt, &evType, &epoch, &worker, &e.LeaseExpiresAt)
	if err != nil {
		return e, err
	}
	e.Stream = store.Stream(stream)
	if e.TxID, err = parseTxID(txid); err != nil {
		return e, err
	}
	e.ExecutionID = execIDString(e.PartitionKey, exec)
	if flow != nil {
		e.FlowID = flow.String()
	}
	e.Outcome, e.Namespace, e.EventType, e.Worker = deref(outcome), deref(ns), deref(evType), deref(worker)
	if epoch != nil {
		e.LeaseEpoch = *epoch
	}
	return e, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Start positions for a new cursor.
type Start int

// Starts.
const (
	FromStart Start = iota // every retained event
	FromNow                // only events of transactions after now
)

// Horizon is the cursor below which every transaction has ended: starting
// there skips everything committed so far and nothing committed later.
func Horizon(ctx context.Context, db store.DB) (Cursor, error) {
	var s string
	if err := db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&s); err != nil {
		return Cursor{}, fmt.Errorf("read transaction horizon: %w", err)
	}
	xmin, err := parseTxID(s)
	if err != nil {
		return Cursor{}, err
	}
	return Cursor{TxID: xmin - 1, EventID: math.MaxInt64}, nil
}

// Consumer is a named consumer's row.
type Consumer struct {
	Name   string
	Stream store.Stream
	Cursor Cursor
}

// Register creates a named consumer at start, or returns the existing one
// (whose cursor is kept: a restart resumes right after it). Registering an
// existing name for another stream is a conflict.
func Register(ctx context.Context, db store.DB, name string, s store.Stream, start Start) (*Consumer, error) {
	if err := leases.ValidateName("consumer", name); err != nil {
		return nil, err
	}
	if _, err := ParseStream(string(s)); err != nil {
		return nil, err
	}
	c := Cursor{}
	if start == FromNow {
		var err error
		if c, err = Horizon(ctx, db); err != nil {
			return nil, err
		}
	}
	if _, err := db.Exec(ctx, `INSERT INTO ff_outbox_consumer (name, stream, cursor_txid, cursor_event_id)
		VALUES ($1, $2, $3::text::xid8, $4) ON CONFLICT (name) DO NOTHING`,
		name, string(s), strconv.FormatUint(c.TxID, 10), c.EventID); err != nil {
		return nil, fmt.Errorf("register consumer %s: %w", name, err)
	}
	got, err := Get(ctx, db, name)
	if err != nil {
		return nil, err
	}
	if got.Stream != s {
		return nil, &fault.ConflictError{Object: "consumer", ID: name, Reason: "registered for stream " + string(got.Stream), Existing: got}
	}
	return got, nil
}

// Get reads a named consumer.
func Get(ctx context.Context, db store.DB, name string) (*Consumer, error) {
	var c Consumer
	var stream, txid string
	err := db.QueryRow(ctx, `SELECT name, stream, cursor_txid::text, cursor_event_id FROM ff_outbox_consumer WHERE name = $1`,
		name).Scan(&c.Name, &stream, &txid, &c.Cursor.EventID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &fault.NotFoundError{Object: "consumer", ID: name}
	}
	if err != nil {
		return nil, fmt.Errorf("read consumer %s: %w", name, err)
	}
	c.Stream = store.Stream(stream)
	c.Cursor.TxID, err = parseTxID(txid)
	return &c, err
}

// Ack moves a consumer's cursor forward to c, in db (pass the transaction
// that did the consumer's work for exactly-once processing). A cursor
// never moves back.
func Ack(ctx context.Context, db store.DB, name string, c Cursor) error {
	tag, err := db.Exec(ctx, `UPDATE ff_outbox_consumer SET cursor_txid = $2::text::xid8, cursor_event_id = $3,
			updated_at = now(), last_read_at = now()
		WHERE name = $1 AND (cursor_txid, cursor_event_id) <= ($2::text::xid8, $3)`,
		name, strconv.FormatUint(c.TxID, 10), c.EventID)
	if err != nil {
		return fmt.Errorf("ack consumer %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := Get(ctx, db, name); err != nil {
			return err
		}
		return &fault.ConflictError{Object: "consumer", ID: name, Reason: "its cursor is already past " + fmt.Sprint(c)}
	}
	return nil
}

// Drop removes a named consumer: retention stops waiting for it.
func Drop(ctx context.Context, db store.DB, name string) error {
	tag, err := db.Exec(ctx, `DELETE FROM ff_outbox_consumer WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("drop consumer %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return &fault.NotFoundError{Object: "consumer", ID: name}
	}
	return nil
}
