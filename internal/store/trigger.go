package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// TriggerRow is a stored trigger with its target's params (the schedules'
// params format).
type TriggerRow struct {
	ffdtype.Trigger
	Params json.RawMessage
}

const triggerColumns = `name, namespace, event, filter, target, params, paused, fired, created_at`

// countedTriggersSQL reads triggers with what each started: the count
// kept on the row from before migration 00041 and its rows of
// ff_trigger_fired, those of its name and creation. $1, when not NULL,
// names the one trigger to read.
const countedTriggersSQL = `SELECT t.name, t.namespace, t.event, t.filter, t.target, t.params, t.paused,
	t.fired + coalesce(c.fired, 0), t.created_at
FROM ff_trigger t LEFT JOIN (
	SELECT trigger_name, trigger_created_at, sum(fired)::bigint AS fired FROM ff_trigger_fired
	WHERE $1::text IS NULL OR trigger_name = $1
	GROUP BY trigger_name, trigger_created_at
) c ON c.trigger_name = t.name AND c.trigger_created_at = t.created_at
WHERE $1::text IS NULL OR t.name = $1
ORDER BY t.name`

func collectTriggers(rows pgx.Rows, err error) ([]*TriggerRow, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*TriggerRow, error) {
		var t TriggerRow
		err := row.Scan(&t.Name, &t.Namespace, &t.Event, &t.Filter, &t.Target, &t.Params, &t.Paused, &t.Fired, &t.CreatedAt)
		return &t, err
	})
}

// InsertTrigger stores a trigger; a name in use is IsTriggerTaken.
func InsertTrigger(ctx context.Context, db DB, t TriggerRow) (*TriggerRow, error) {
	var filter any
	if t.Filter != nil {
		filter = t.Filter
	}
	ts, err := collectTriggers(db.Query(ctx, `INSERT INTO ff_trigger (name, namespace, event, filter, target, params, paused)
		VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING `+triggerColumns,
		t.Name, t.Namespace, t.Event, filter, t.Target, t.Params, t.Paused))
	if err != nil {
		return nil, err
	}
	return ts[0], nil
}

// IsTriggerTaken reports an insert of a trigger whose name exists.
func IsTriggerTaken(err error) bool { return refusedBy(err, "23505", "ff_trigger_pkey") }

// ListTriggers reads every trigger, by name.
func ListTriggers(ctx context.Context, db DB) ([]*TriggerRow, error) {
	ts, err := collectTriggers(db.Query(ctx, countedTriggersSQL, nil))
	return ts, wrap("list triggers", err)
}

// GetTrigger reads one trigger, or pgx.ErrNoRows.
func GetTrigger(ctx context.Context, db DB, name string) (*TriggerRow, error) {
	ts, err := collectTriggers(db.Query(ctx, countedTriggersSQL, name))
	if err != nil {
		return nil, wrap("read trigger "+name, err)
	}
	if len(ts) == 0 {
		return nil, pgx.ErrNoRows
	}
	return ts[0], nil
}

// DeleteTrigger deletes a trigger and its counts; false when there was
// none.
func DeleteTrigger(ctx context.Context, db DB, name string) (found bool, err error) {
	err = InTx(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM ff_trigger WHERE name = $1`, name)
		if err != nil {
			return err
		}
		found = tag.RowsAffected() == 1
		_, err = tx.Exec(ctx, `DELETE FROM ff_trigger_fired WHERE trigger_name = $1`, name)
		return err
	})
	return found, wrap("delete trigger "+name, err)
}

// EventPartition is the partition of the event key of name in namespace
// (ff_key_partition of the namespace and "name/key", as
// ff_publish_event places it).
func EventPartition(namespace, name, key string) int16 {
	return ident.KeyPartition(namespace, name+"/"+key)
}

const publishedColumns = `event_id, namespace, name, event_key, payload, published_at, fired_at, started, coalesce(error, '')`

func scanPublished(row pgx.CollectableRow) (*ffdtype.Event, error) {
	var e ffdtype.Event
	var payload []byte
	err := row.Scan(&e.ID, &e.Namespace, &e.Name, &e.Key, &payload, &e.PublishedAt, &e.FiredAt, &e.Started, &e.Error)
	e.Payload = payload
	return &e, err
}

// PublishEvent stores an event, or returns the one published under its
// key before (existed).
func PublishEvent(ctx context.Context, db DB, namespace, name, key string, payload []byte) (e *ffdtype.Event, existed bool, err error) {
	p := EventPartition(namespace, name, key)
	var body any
	if len(payload) > 0 {
		body = string(payload)
	}
	// The notification goes in the same batch, sent when the event
	// commits (with the caller's transaction, when there is one).
	var es []*ffdtype.Event
	b := &pgx.Batch{}
	b.Queue(publishEventSQL, p, ident.NewUUIDIn(p), namespace, name, key, body).Query(func(rows pgx.Rows) error {
		var err error
		es, err = pgx.CollectRows(rows, scanPublished)
		return err
	})
	b.Queue(`SELECT pg_notify($1, '')`, ChannelEvent)
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, false, wrap("publish event "+name, err)
	}
	if len(es) == 1 {
		return es[0], false, nil
	}
	rows, err := db.Query(ctx, eventByKeySQL, p, namespace, name, key)
	if err == nil {
		e, err = pgx.CollectExactlyOneRow(rows, scanPublished)
	}
	return e, true, wrap("read event "+name+" of key "+key, err)
}

// GetEvent reads one event by id, or pgx.ErrNoRows.
func GetEvent(ctx context.Context, db DB, id uuid.UUID) (*ffdtype.Event, error) {
	rows, err := db.Query(ctx, `SELECT `+publishedColumns+` FROM ff_event WHERE event_id = $1`, id)
	if err != nil {
		return nil, wrap("read event "+id.String(), err)
	}
	return pgx.CollectExactlyOneRow(rows, scanPublished)
}

// UnfiredEvent is an event the daemon has still to fire, locked.
type UnfiredEvent struct {
	Partition int16
	ffdtype.Event
}

// lockUnfiredSQL locks up to $1 events not fired yet, oldest first,
// skipping those another daemon holds; routed, of the partitions $2 of
// one shard only (a distributed Postgres locks rows of one shard at a
// time).
var lockUnfiredSQL = [2]string{lockUnfiredStatement(false), lockUnfiredStatement(true)}

func lockUnfiredStatement(routed bool) string {
	shard := ""
	if routed {
		shard = " AND e.partition_key = ANY($2)"
	}
	return `SELECT e.partition_key, ` + publishedColumns + ` FROM ff_event e
		WHERE e.fired_at IS NULL` + shard + `
		ORDER BY e.published_at LIMIT $1 FOR UPDATE OF e SKIP LOCKED`
}

// EventScope is where one transaction that fires events takes them, and
// how many it takes. On one Postgres it is every partition, a batch at a
// time: the batch shares one commit. On a distributed Postgres it is the
// partitions of one shard, a batch at a time: what an event starts lands
// on its partition (trigger.FlowID, trigger.Key), so the transaction
// writes that shard alone and commits on one node.
type EventScope struct {
	routed bool
	parts  []int16
	// Batch is the most events one transaction of the scope fires.
	Batch int
	// Unfired is the most events worth trying to fire from the scope in
	// a pass: on a distributed Postgres, how many it held when it was
	// read; on one Postgres, not counted, one batch.
	Unfired int
}

// UnfiredEventScopes returns the scopes that hold unfired events, batch
// the most events a transaction takes: on one Postgres, the one scope of
// every partition; on a distributed one, each shard with unfired events,
// in order, with their count (one read over every shard, outside a
// transaction).
func UnfiredEventScopes(ctx context.Context, db DB, batch int) ([]EventScope, error) {
	dist, err := Distributed(ctx, db)
	if err != nil || !dist {
		return []EventScope{{Batch: batch, Unfired: batch}}, err
	}
	type unfired struct {
		part  int16
		count int
	}
	rows, err := db.Query(ctx, `SELECT partition_key, count(*) FROM ff_event WHERE fired_at IS NULL
		GROUP BY partition_key ORDER BY partition_key`)
	if err != nil {
		return nil, wrap("find unfired events", err)
	}
	parts, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (u unfired, err error) {
		return u, row.Scan(&u.part, &u.count)
	})
	if err != nil {
		return nil, wrap("find unfired events", err)
	}
	shards, err := byShard(ctx, db, parts, func(u unfired) int16 { return u.part })
	if err != nil {
		return nil, wrap("find unfired events", err)
	}
	scopes := make([]EventScope, len(shards))
	for i, sh := range shards {
		scopes[i] = EventScope{routed: true, parts: sh.parts, Batch: batch}
		for _, u := range sh.items {
			scopes[i].Unfired += u.count
		}
	}
	return scopes, nil
}

// LockUnfiredEvents locks up to limit events of scope s not fired yet,
// oldest first, skipping those another daemon holds.
func LockUnfiredEvents(ctx context.Context, tx pgx.Tx, s EventScope, limit int) ([]*UnfiredEvent, error) {
	if s.routed {
		return lockUnfired(ctx, tx, lockUnfiredSQL[1], limit, s.parts)
	}
	return lockUnfired(ctx, tx, lockUnfiredSQL[0], limit)
}

func lockUnfired(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]*UnfiredEvent, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap("lock unfired events", err)
	}
	es, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*UnfiredEvent, error) {
		var u UnfiredEvent
		var payload []byte
		err := row.Scan(&u.Partition, &u.ID, &u.Namespace, &u.Name, &u.Key, &payload, &u.PublishedAt, &u.FiredAt, &u.Started, &u.Error)
		u.Payload = payload
		return &u, err
	})
	return es, wrap("lock unfired events", err)
}

// MatchingTriggers reads the triggers an event fires: of its namespace
// and name, not paused, whose filter its payload contains.
func MatchingTriggers(ctx context.Context, db DB, e *UnfiredEvent) ([]*TriggerRow, error) {
	var payload any
	if len(e.Payload) > 0 {
		payload = string(e.Payload)
	}
	ts, err := collectTriggers(db.Query(ctx, `SELECT `+triggerColumns+` FROM ff_trigger
		WHERE namespace = $1 AND event = $2 AND NOT paused
			AND (filter IS NULL OR coalesce($3::jsonb @> filter, false))
		ORDER BY name`, e.Namespace, e.Name, payload))
	return ts, wrap(fmt.Sprintf("read the triggers of event %s", e.Name), err)
}

// MarkFired records that an event's triggers fired at the database's
// time at: started is how many executions and flows they started,
// failure why one failed ("": none). CountFirings counts them per
// trigger.
func MarkFired(ctx context.Context, tx pgx.Tx, e *UnfiredEvent, at time.Time, started int, failure string) error {
	_, err := tx.Exec(ctx, `UPDATE ff_event SET fired_at = $3, started = $4, error = nullif($5, '')
		WHERE partition_key = $1 AND event_id = $2`, e.Partition, e.ID, at, started, failure)
	return wrap("mark event "+e.ID.String()+" fired", err)
}

// TriggerFirings is how many executions and flows a trigger started for
// the events of one partition.
type TriggerFirings struct {
	Partition int16
	Trigger   *TriggerRow
	Started   int
}

// CountFirings adds what triggers started to their counts, one row per
// trigger and event partition, in one statement: a routed batch's rows
// are all of its partition, so on a distributed Postgres the statement
// writes the shard the batch fired on. Rows are written in their key's
// order, so that two daemons' batches take the rows they share in one
// order.
func CountFirings(ctx context.Context, tx pgx.Tx, fs []TriggerFirings) error {
	fs = slices.Clone(fs)
	slices.SortFunc(fs, func(a, b TriggerFirings) int {
		return cmp.Or(cmp.Compare(a.Partition, b.Partition), strings.Compare(a.Trigger.Name, b.Trigger.Name),
			a.Trigger.CreatedAt.Compare(b.Trigger.CreatedAt))
	})
	var sql strings.Builder
	args := make([]any, 0, 4*len(fs))
	for i, f := range fs {
		if i+1 < len(fs) && f.Partition == fs[i+1].Partition && f.Trigger.Name == fs[i+1].Trigger.Name &&
			f.Trigger.CreatedAt.Equal(fs[i+1].Trigger.CreatedAt) {
			fs[i+1].Started += f.Started // one row a key: an upsert may not touch a row twice
			continue
		}
		if f.Started == 0 {
			continue
		}
		if len(args) > 0 {
			sql.WriteString(", ")
		}
		n := len(args)
		fmt.Fprintf(&sql, "($%d::smallint, $%d, $%d::timestamptz, $%d::bigint)", n+1, n+2, n+3, n+4)
		args = append(args, f.Partition, f.Trigger.Name, f.Trigger.CreatedAt, f.Started)
	}
	if len(args) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, `INSERT INTO ff_trigger_fired AS c (partition_key, trigger_name, trigger_created_at, fired)
		VALUES `+sql.String()+`
		ON CONFLICT (partition_key, trigger_name, trigger_created_at) DO UPDATE SET fired = c.fired + excluded.fired`, args...)
	return wrap("count what triggers started", err)
}

// DeleteFiredEvents deletes the events fired longer ago than age, which
// frees their keys: a key publishes once for as long as its event is
// kept. The cutoff is read from the database's clock and passed in (a
// distributed Postgres evaluates no now() in a multi-shard delete's test).
func DeleteFiredEvents(ctx context.Context, db DB, age time.Duration) (int, error) {
	if age <= 0 {
		return 0, nil
	}
	now, err := Now(ctx, db)
	if err != nil {
		return 0, err
	}
	tag, err := db.Exec(ctx, `DELETE FROM ff_event WHERE fired_at < $1`, now.Add(-age))
	if err != nil {
		return 0, wrap("delete fired events", err)
	}
	return int(tag.RowsAffected()), nil
}

// UnfiredEvents reads up to limit events not fired yet, oldest first
// (ff_event_unfired), and how many there are, counted up to countCap.
func UnfiredEvents(ctx context.Context, db DB, limit, countCap int) ([]*ffdtype.Event, int, error) {
	rows, err := db.Query(ctx, `SELECT `+publishedColumns+` FROM ff_event WHERE fired_at IS NULL ORDER BY published_at LIMIT $1`, limit)
	if err != nil {
		return nil, 0, wrap("list unfired events", err)
	}
	es, err := pgx.CollectRows(rows, scanPublished)
	if err != nil {
		return nil, 0, wrap("list unfired events", err)
	}
	var n int
	err = db.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM ff_event WHERE fired_at IS NULL LIMIT $1) x`, countCap).Scan(&n)
	return es, n, wrap("count unfired events", err)
}

// publishEventSQL stores an event unless its key was published before.
const publishEventSQL = `INSERT INTO ff_event (partition_key, event_id, namespace, name, event_key, payload)
		VALUES ($1, $2, $3, $4, $5, $6::jsonb)
		ON CONFLICT (partition_key, namespace, name, event_key) DO NOTHING
		RETURNING ` + publishedColumns

// eventByKeySQL reads the event published under a key.
const eventByKeySQL = `SELECT ` + publishedColumns + ` FROM ff_event
		WHERE partition_key = $1 AND namespace = $2 AND name = $3 AND event_key = $4`
