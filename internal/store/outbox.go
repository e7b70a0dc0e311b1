package store

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
)

func execIDString(part int16, u *uuid.UUID) string {
	if u == nil {
		return ""
	}
	return ffdtype.ExecutionID{Partition: part, UUID: *u}.String()
}

// ParseTxID parses a transaction id (xid8) as Postgres prints it.
func ParseTxID(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("txid %q: %w", s, err)
	}
	return v, nil
}

// The protocol of docs/design.md section 7, per table. $1,$2 is the cursor; only
// transactions below the horizon are read (the snapshot's xmin; on a
// distributed Postgres, $4: distributedHorizonSQL), so no event can later
// appear behind the cursor.
const (
	snapshotHorizon    = `pg_snapshot_xmin(pg_current_snapshot())`
	distributedHorizon = `$4::text::xid8`
	completionSelect   = `SELECT 'completion'::text AS stream, event_id, txid::text AS txid_text, partition_key,
		execution_id, flow_id, occurred_at, attempt, outcome, namespace, dispatched_at, NULL::text AS event_type,
		NULL::bigint AS lease_epoch, NULL::text AS worker, NULL::timestamptz AS lease_expires_at, step, txid AS tx
	FROM ff_completion_event
	WHERE (txid, event_id) > ($1::text::xid8, $2::bigint) AND txid < HORIZON
	ORDER BY txid, event_id LIMIT $3`
	leaseSelect = `SELECT 'lease'::text AS stream, event_id, txid::text AS txid_text, partition_key,
		execution_id, NULL::uuid AS flow_id, occurred_at, attempt, NULL::text AS outcome, NULL::text AS namespace,
		NULL::timestamptz AS dispatched_at, event_type, lease_epoch, worker, lease_expires_at, NULL::text AS step, txid AS tx
	FROM ff_lease_event
	WHERE (txid, event_id) > ($1::text::xid8, $2::bigint) AND txid < HORIZON
	ORDER BY txid, event_id LIMIT $3`
	eventColumns = `stream, event_id, txid_text, partition_key, execution_id, flow_id, occurred_at, attempt, outcome,
		namespace, dispatched_at, event_type, lease_epoch, worker, lease_expires_at, step`
)

// readSQL is the read of stream s below horizon: for both streams, each
// side is already limited and ordered; the merge keeps the first $3 of
// their union.
func readSQL(s ffdtype.OutboxStream, horizon string) string {
	sel := func(q string) string { return strings.ReplaceAll(q, "HORIZON", horizon) }
	switch s {
	case ffdtype.StreamCompletion:
		return `SELECT ` + eventColumns + ` FROM (` + sel(completionSelect) + `) q ORDER BY tx, event_id`
	case ffdtype.StreamLease:
		return `SELECT ` + eventColumns + ` FROM (` + sel(leaseSelect) + `) q ORDER BY tx, event_id`
	}
	return `SELECT ` + eventColumns + ` FROM ((` + sel(completionSelect) + `) UNION ALL (` + sel(leaseSelect) + `)) q
		ORDER BY tx, event_id LIMIT $3`
}

// distributedHorizonSQL is the horizon on a distributed Postgres, where
// the snapshot's xmin is not enough. A transaction that wrote on several
// nodes commits on the coordinator (whose transaction id its events
// carry) before its prepared parts commit on the worker nodes: in
// between, the coordinator's xmin has passed it while its rows are not
// yet visible there. Citus records each such transaction in
// pg_dist_transaction as it commits (the row's xmin is the transaction's
// id) and deletes the record only once every node has committed (its
// recovery, every citus.recover_2pc_interval). So the horizon stays
// below the oldest transaction still recorded: an event is read once all
// of it is visible, at most a recovery interval late. The record's id is
// 32 bits: it is placed in the epoch of the snapshot's xmax.
const distributedHorizonSQL = `
WITH s AS (
	SELECT pg_snapshot_xmin(pg_current_snapshot())::text::numeric AS xmin,
		pg_snapshot_xmax(pg_current_snapshot())::text::numeric AS xmax
), r AS (
	SELECT min(CASE WHEN s.xmax - mod(s.xmax, 4294967296) + t.x > s.xmax
			THEN s.xmax - mod(s.xmax, 4294967296) + t.x - 4294967296
			ELSE s.xmax - mod(s.xmax, 4294967296) + t.x END) AS oldest
	FROM s, (SELECT xmin::text::numeric AS x FROM pg_dist_transaction) t
)
SELECT least(s.xmin, coalesce(r.oldest, s.xmin))::text FROM s, r`

// horizon reads distributedHorizonSQL.
func horizon(ctx context.Context, db DB) (uint64, error) {
	var s string
	if err := db.QueryRow(ctx, distributedHorizonSQL).Scan(&s); err != nil {
		return 0, fmt.Errorf("read transaction horizon: %w", err)
	}
	return ParseTxID(s)
}

// ReadEvents returns up to limit committed events of stream s after the
// cursor, in (txid, event_id) order: the protocol of docs/design.md
// section 7.
func ReadEvents(ctx context.Context, db DB, s ffdtype.OutboxStream, after ffdtype.OutboxCursor, limit int) ([]ffdtype.OutboxEvent, error) {
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, err
	}
	q, args := readSQL(s, snapshotHorizon), []any{strconv.FormatUint(after.TxID, 10), after.EventID, limit}
	if dist {
		h, err := horizon(ctx, db)
		if err != nil {
			return nil, fmt.Errorf("read %s events: %w", s, err)
		}
		q, args = readSQL(s, distributedHorizon), append(args, strconv.FormatUint(h, 10))
	}
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", s, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("read %s events: %w", s, err)
	}
	return events, nil
}

func scanEvent(r pgx.CollectableRow) (ffdtype.OutboxEvent, error) {
	var (
		e                           ffdtype.OutboxEvent
		stream, txid                string
		exec, flow                  *uuid.UUID
		outcome, ns, evType, worker *string
		step                        *string
		epoch                       *int64
	)
	err := r.Scan(&stream, &e.EventID, &txid, &e.PartitionKey, &exec, &flow, &e.OccurredAt, &e.Attempt,
		&outcome, &ns, &e.DispatchedAt, &evType, &epoch, &worker, &e.LeaseExpiresAt, &step)
	if err != nil {
		return e, err
	}
	e.Stream = ffdtype.OutboxStream(stream)
	if e.TxID, err = ParseTxID(txid); err != nil {
		return e, err
	}
	e.ExecutionID = execIDString(e.PartitionKey, exec)
	if flow != nil {
		e.FlowID = flow.String()
	}
	e.Outcome, e.Namespace, e.EventType, e.Worker = deref(outcome), deref(ns), deref(evType), deref(worker)
	e.Step = deref(step)
	if epoch != nil {
		e.LeaseEpoch = *epoch
	}
	return e, nil
}

// Horizon is the cursor below which every transaction has ended: starting
// there skips everything committed so far and nothing committed later.
func Horizon(ctx context.Context, db DB) (ffdtype.OutboxCursor, error) {
	dist, err := Distributed(ctx, db)
	if err != nil {
		return ffdtype.OutboxCursor{}, err
	}
	var xmin uint64
	if dist {
		if xmin, err = horizon(ctx, db); err != nil {
			return ffdtype.OutboxCursor{}, err
		}
	} else {
		var s string
		if err := db.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&s); err != nil {
			return ffdtype.OutboxCursor{}, fmt.Errorf("read transaction horizon: %w", err)
		}
		if xmin, err = ParseTxID(s); err != nil {
			return ffdtype.OutboxCursor{}, err
		}
	}
	return ffdtype.OutboxCursor{TxID: xmin - 1, EventID: math.MaxInt64}, nil
}

// InsertConsumer registers a named consumer at c unless the name exists.
func InsertConsumer(ctx context.Context, db DB, name string, s ffdtype.OutboxStream, c ffdtype.OutboxCursor) error {
	_, err := db.Exec(ctx, `INSERT INTO ff_outbox_consumer (name, stream, cursor_txid, cursor_event_id)
		VALUES ($1, $2, $3::text::xid8, $4) ON CONFLICT (name) DO NOTHING`,
		name, string(s), strconv.FormatUint(c.TxID, 10), c.EventID)
	return wrap("register consumer "+name, err)
}

// GetConsumer reads a named consumer, or returns pgx.ErrNoRows.
func GetConsumer(ctx context.Context, db DB, name string) (*ffdtype.OutboxConsumer, error) {
	return getConsumer(ctx, db, `SELECT name, stream, cursor_txid::text, cursor_event_id
		FROM ff_outbox_consumer WHERE name = $1`, name)
}

// LockConsumer reads a named consumer and locks its row for the caller's
// transaction, so two processes running one consumer take turns; or
// returns pgx.ErrNoRows.
func LockConsumer(ctx context.Context, tx pgx.Tx, name string) (*ffdtype.OutboxConsumer, error) {
	return getConsumer(ctx, tx, `SELECT name, stream, cursor_txid::text, cursor_event_id
		FROM ff_outbox_consumer WHERE name = $1 FOR NO KEY UPDATE`, name)
}

func getConsumer(ctx context.Context, db DB, sql, name string) (*ffdtype.OutboxConsumer, error) {
	var c ffdtype.OutboxConsumer
	var stream, txid string
	if err := db.QueryRow(ctx, sql, name).Scan(&c.Name, &stream, &txid, &c.Cursor.EventID); err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		return nil, wrap("read consumer "+name, err)
	}
	c.Stream = ffdtype.OutboxStream(stream)
	var err error
	c.Cursor.TxID, err = ParseTxID(txid)
	return &c, err
}

// TouchConsumer records that a named consumer read (and found nothing).
func TouchConsumer(ctx context.Context, db DB, name string) error {
	_, err := db.Exec(ctx, `UPDATE ff_outbox_consumer SET last_read_at = now() WHERE name = $1`, name)
	return wrap("touch consumer "+name, err)
}

// AdvanceConsumer moves a consumer's cursor forward to c; moved is false
// when the consumer does not exist or its cursor is already past c (a
// cursor never moves back).
func AdvanceConsumer(ctx context.Context, db DB, name string, c ffdtype.OutboxCursor) (moved bool, err error) {
	tag, err := db.Exec(ctx, `UPDATE ff_outbox_consumer SET cursor_txid = $2::text::xid8, cursor_event_id = $3,
			updated_at = now(), last_read_at = now()
		WHERE name = $1 AND (cursor_txid, cursor_event_id) <= ($2::text::xid8, $3)`,
		name, strconv.FormatUint(c.TxID, 10), c.EventID)
	if err != nil {
		return false, wrap("ack consumer "+name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// DeleteConsumer removes a named consumer; found is false when none had
// that name.
func DeleteConsumer(ctx context.Context, db DB, name string) (found bool, err error) {
	tag, err := db.Exec(ctx, `DELETE FROM ff_outbox_consumer WHERE name = $1`, name)
	if err != nil {
		return false, wrap("drop consumer "+name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// retainCompletionSQL and retainLeaseSQL delete, in one bounded batch,
// events older than the window ($1 µs) that every registered consumer of
// their stream has passed; completion events must also have been
// dispatched.
const (
	retainCompletionSQL = `
DELETE FROM ff_completion_event WHERE (partition_key, event_id) IN (
	SELECT e.partition_key, e.event_id FROM ff_completion_event e
	WHERE e.occurred_at < now() - $1::bigint * interval '1 microsecond' AND e.dispatched_at IS NOT NULL
		AND NOT EXISTS (SELECT 1 FROM ff_outbox_consumer c
			WHERE c.stream IN ('completion', 'all') AND (e.txid, e.event_id) > (c.cursor_txid, c.cursor_event_id))
	ORDER BY e.event_id
	LIMIT $2)`
	retainLeaseSQL = `
DELETE FROM ff_lease_event WHERE (partition_key, event_id) IN (
	SELECT e.partition_key, e.event_id FROM ff_lease_event e
	WHERE e.occurred_at < now() - $1::bigint * interval '1 microsecond'
		AND NOT EXISTS (SELECT 1 FROM ff_outbox_consumer c
			WHERE c.stream IN ('lease', 'all') AND (e.txid, e.event_id) > (c.cursor_txid, c.cursor_event_id))
	ORDER BY e.event_id
	LIMIT $2)`
)

// DeleteRetained deletes one batch of at most batch events of stream s
// (completion or lease) past the window, and returns how many it deleted.
func DeleteRetained(ctx context.Context, db DB, s ffdtype.OutboxStream, window time.Duration, batch int) (int, error) {
	q := retainCompletionSQL
	if s == ffdtype.StreamLease {
		q = retainLeaseSQL
	}
	tag, err := db.Exec(ctx, q, window.Microseconds(), batch)
	if err != nil {
		return 0, wrap(fmt.Sprintf("retention of %s events", s), err)
	}
	return int(tag.RowsAffected()), nil
}

// IdleConsumer is a consumer holding retention back.
type IdleConsumer struct {
	Name   string
	Stream ffdtype.OutboxStream
	Idle   time.Duration
}

// IdleConsumers lists consumers that have not read for longer than limit
// while events wait for them: they hold retention back, and are reported,
// never dropped. The consumers are read first, then, for each, whether an
// event waits past its cursor (one statement per consumer and stream): a
// distributed Postgres runs no subquery that correlates a consumer's row
// with the events' shards.
func IdleConsumers(ctx context.Context, db DB, limit time.Duration) ([]IdleConsumer, error) {
	rows, err := db.Query(ctx, `
		SELECT c.name, c.stream, extract(epoch FROM now() - c.last_read_at), c.cursor_txid::text, c.cursor_event_id
		FROM ff_outbox_consumer c
		WHERE c.last_read_at < now() - $1::bigint * interval '1 microsecond'
		ORDER BY c.name`, limit.Microseconds())
	if err != nil {
		return nil, wrap("read idle consumers", err)
	}
	type idle struct {
		IdleConsumer
		txid  string
		event int64
	}
	idles, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (idle, error) {
		var c idle
		var stream string
		var secs float64
		err := r.Scan(&c.Name, &stream, &secs, &c.txid, &c.event)
		c.Stream, c.Idle = ffdtype.OutboxStream(stream), time.Duration(secs*float64(time.Second))
		return c, err
	})
	if err != nil {
		return nil, wrap("read idle consumers", err)
	}
	var out []IdleConsumer
	for _, c := range idles {
		var tables []string
		if c.Stream == ffdtype.StreamCompletion || c.Stream == ffdtype.StreamAll {
			tables = append(tables, "ff_completion_event")
		}
		if c.Stream == ffdtype.StreamLease || c.Stream == ffdtype.StreamAll {
			tables = append(tables, "ff_lease_event")
		}
		for _, table := range tables {
			var waits bool
			err := db.QueryRow(ctx, `SELECT count(*) > 0 FROM (SELECT 1 FROM `+table+`
				WHERE (txid, event_id) > ($1::text::xid8, $2) LIMIT 1) w`, c.txid, c.event).Scan(&waits)
			if err != nil {
				return nil, wrap("read idle consumers", err)
			}
			if waits {
				out = append(out, c.IdleConsumer)
				break
			}
		}
	}
	return out, nil
}

// Node is a database server by address: a worker node of a distributed
// Postgres.
type Node struct {
	Host string
	Port uint16
}

// OutboxNodes returns the nodes whose WAL holds the outbox's inserts
// where the outbox tables are distributed (Citus): every active primary
// node that holds a shard of them or may be given one (a node added for a
// rebalance has a slot before its first shard arrives). It returns
// nothing on one Postgres, whose own WAL holds them.
func OutboxNodes(ctx context.Context, db DB) ([]Node, error) {
	dist, err := distributedTable(ctx, db, "ff_completion_event")
	if err != nil || !dist {
		return nil, wrap("read whether the outbox is distributed", err)
	}
	rows, err := db.Query(ctx, `SELECT n.nodename, n.nodeport FROM pg_dist_node n
		WHERE n.isactive AND n.noderole = 'primary' AND (n.shouldhaveshards OR EXISTS (
			SELECT 1 FROM pg_dist_placement p JOIN pg_dist_shard s USING (shardid)
			WHERE p.groupid = n.groupid
				AND s.logicalrelid IN ('ff_completion_event'::regclass, 'ff_lease_event'::regclass)))
		ORDER BY n.nodename, n.nodeport`)
	if err != nil {
		return nil, wrap("read the outbox's nodes", err)
	}
	nodes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Node, error) {
		var n Node
		var port int32
		err := r.Scan(&n.Host, &port)
		n.Port = uint16(port)
		return n, err
	})
	return nodes, wrap("read the outbox's nodes", err)
}
