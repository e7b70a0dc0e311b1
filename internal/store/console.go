package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// FlowStateCounts counts flows by state (in a namespace; "" for all).
func FlowStateCounts(ctx context.Context, db DB, namespace string) (map[ffdtype.FlowState]int, error) {
	out, err := countBy[ffdtype.FlowState](ctx, db, `SELECT state, count(*) FROM ff_flow
		WHERE $1::text IS NULL OR namespace = $1 GROUP BY state`, nullIfEmpty(namespace))
	return out, wrap("count flows by state", err)
}

// RecentCompletions counts the completion events of executions in the
// last minutes, reading at most the newest 100,000 events (the id index,
// backwards), so the answer costs the same however large the outbox.
func RecentCompletions(ctx context.Context, db DB, minutes int) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM (
			SELECT occurred_at FROM ff_completion_event WHERE execution_id IS NOT NULL ORDER BY event_id DESC LIMIT 100000) e
		WHERE occurred_at > now() - $1 * interval '1 minute'`, minutes).Scan(&n)
	return n, wrap("count recent completions", err)
}

// LaneRates counts, by lane, the executions that finished in the last
// minutes, among the newest 100,000 completion events (bounded, whatever
// the outbox's size).
func LaneRates(ctx context.Context, db DB, minutes int) (map[string]int, error) {
	out, err := countBy[string](ctx, db, `SELECT x.lane, count(*) FROM (
			SELECT partition_key, execution_id, occurred_at FROM ff_completion_event
			WHERE execution_id IS NOT NULL ORDER BY event_id DESC LIMIT 100000) c
		JOIN ff_execution x USING (partition_key, execution_id)
		WHERE c.occurred_at > now() - $1 * interval '1 minute'
		GROUP BY x.lane`, minutes)
	return out, wrap("count recent completions by lane", err)
}

// ConsumerLag is a named consumer's position and how far behind it is.
type ConsumerLag struct {
	Name       string   `db:"name"`
	Stream     string   `db:"stream"`
	Behind     int      `db:"behind"`       // events after its cursor, counted up to 100,000
	LagSeconds *float64 `db:"lag_seconds"`  // age of the oldest event it has not read; nil: none
	IdleSecond float64  `db:"idle_seconds"` // since it last read
}

// consumerLagSQL is one consumer's lag: the events of its streams ($1
// completion, $2 lease) after its cursor ($3, $4), counted up to 100,000
// each, and the age of the oldest.
const consumerLagSQL = `SELECT
	(SELECT count(*) FROM (SELECT 1 FROM ff_completion_event e
		WHERE $1 AND (e.txid, e.event_id) > ($3::xid8, $4) LIMIT 100000) q)
	+ (SELECT count(*) FROM (SELECT 1 FROM ff_lease_event e
		WHERE $2 AND (e.txid, e.event_id) > ($3::xid8, $4) LIMIT 100000) q),
	extract(epoch FROM now() - least(
		(SELECT min(e.occurred_at) FROM (SELECT occurred_at FROM ff_completion_event e
			WHERE $1 AND (e.txid, e.event_id) > ($3::xid8, $4)
			ORDER BY e.txid, e.event_id LIMIT 1) e),
		(SELECT min(e.occurred_at) FROM (SELECT occurred_at FROM ff_lease_event e
			WHERE $2 AND (e.txid, e.event_id) > ($3::xid8, $4)
			ORDER BY e.txid, e.event_id LIMIT 1) e)))::float8`

// ConsumerLags reads every named consumer with its lag: the consumers
// first, then one statement each over the outboxes from its cursor, in
// one pipelined batch (two round trips; a subquery correlated with the
// consumer's row is what a distributed Postgres cannot run).
func ConsumerLags(ctx context.Context, db DB) ([]ConsumerLag, error) {
	rows, err := db.Query(ctx, `SELECT name, stream, cursor_txid::text, cursor_event_id,
			extract(epoch FROM now() - last_read_at)::float8
		FROM ff_outbox_consumer ORDER BY name`)
	if err != nil {
		return nil, wrap("read consumer lags", err)
	}
	type cursor struct {
		txid  string
		event int64
	}
	var cs []ConsumerLag
	var at []cursor
	for rows.Next() {
		var c ConsumerLag
		var cur cursor
		if err := rows.Scan(&c.Name, &c.Stream, &cur.txid, &cur.event, &c.IdleSecond); err != nil {
			rows.Close()
			return nil, wrap("read consumer lags", err)
		}
		cs, at = append(cs, c), append(at, cur)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("read consumer lags", err)
	}
	if len(cs) == 0 {
		return nil, nil
	}
	// One statement a consumer, all in one pipelined batch.
	b := &pgx.Batch{}
	for i := range cs {
		completion := cs[i].Stream == string(ffdtype.StreamCompletion) || cs[i].Stream == string(ffdtype.StreamAll)
		lease := cs[i].Stream == string(ffdtype.StreamLease) || cs[i].Stream == string(ffdtype.StreamAll)
		b.Queue(consumerLagSQL, completion, lease, at[i].txid, at[i].event).QueryRow(func(r pgx.Row) error {
			return r.Scan(&cs[i].Behind, &cs[i].LagSeconds)
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, wrap("read consumer lags", err)
	}
	return cs, nil
}

// Slot is a logical replication slot of the database.
type Slot struct {
	Name          string `db:"slot_name"`
	Active        bool   `db:"active"`
	RetainedBytes int64  `db:"retained_bytes"`
}

// Slots reads the database's logical replication slots (WAL consumers)
// and the WAL each holds back.
func Slots(ctx context.Context, db DB) ([]Slot, error) {
	rows, err := db.Query(ctx, `SELECT slot_name, active,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn), 0)::bigint AS retained_bytes
		FROM pg_replication_slots WHERE database = current_database() AND slot_type = 'logical' ORDER BY slot_name`)
	if err != nil {
		return nil, wrap("read replication slots", err)
	}
	ss, err := pgx.CollectRows(rows, pgx.RowToStructByName[Slot])
	return ss, wrap("read replication slots", err)
}

// FlowProgress is how far a flow's members got.
type FlowProgress struct {
	Done   int // members in a terminal state
	Failed int // of those, failed or expired
	// FailedSteps names the failed or expired members (step name, or
	// the execution id when the member has none), up to five.
	FailedSteps []string
}

// FlowProgressOf reads the progress of each flow in ids, in one query
// over the flows' members (each flow's rows by (partition_key, flow_id)).
func FlowProgressOf(ctx context.Context, db DB, ids []uuid.UUID) (map[uuid.UUID]*FlowProgress, error) {
	parts := make([]int16, len(ids))
	for i, id := range ids {
		parts[i] = ident.Partition(id)
	}
	rows, err := db.Query(ctx, `SELECT e.flow_id,
			count(*) FILTER (WHERE e.state = ANY($3)),
			count(*) FILTER (WHERE e.state = ANY($4)),
			(array_agg(coalesce(e.step, e.execution_id::text) ORDER BY e.execution_id) FILTER (WHERE e.state = ANY($4)))[1:5]
		FROM unnest($1::int2[], $2::uuid[]) AS f(partition_key, flow_id)
		JOIN ff_execution e ON e.partition_key = f.partition_key AND e.flow_id = f.flow_id
		GROUP BY e.flow_id`, parts, pgUUIDs(ids), terminalStates(), []ffdtype.State{ffdtype.StateFailed, ffdtype.StateExpired})
	if err != nil {
		return nil, wrap("read flow progress", err)
	}
	out := make(map[uuid.UUID]*FlowProgress, len(ids))
	var id uuid.UUID
	var p FlowProgress
	_, err = pgx.ForEachRow(rows, []any{&id, &p.Done, &p.Failed, &p.FailedSteps}, func() error {
		q := p
		out[id] = &q
		p = FlowProgress{}
		return nil
	})
	return out, wrap("read flow progress", err)
}

// terminalStates lists the terminal states, for a query's parameter.
func terminalStates() []ffdtype.State {
	var out []ffdtype.State
	for _, s := range ffdtype.States {
		if s.Terminal() {
			out = append(out, s)
		}
	}
	return out
}

// Downstream is one step an execution's edges lead to.
type Downstream struct {
	Step  string
	ID    ffdtype.ExecutionID
	State ffdtype.State
}

// DownstreamsOf reads the steps up's edges lead to, by step name, in one
// query on the upstream's edges.
func DownstreamsOf(ctx context.Context, db DB, flowID uuid.UUID, up ffdtype.ExecutionID) ([]Downstream, error) {
	rows, err := db.Query(ctx, `SELECT coalesce(d.step, ''), d.partition_key, d.execution_id, d.state
		FROM ff_edge e JOIN ff_execution d ON d.partition_key = e.partition_key AND d.execution_id = e.downstream_id
		WHERE e.partition_key = $1 AND e.flow_id = $2 AND e.upstream_id = $3
		ORDER BY d.step, d.execution_id`, up.Partition, flowID, up.UUID)
	if err != nil {
		return nil, wrap("read the downstreams of "+up.String(), err)
	}
	ds, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Downstream, error) {
		var d Downstream
		err := r.Scan(&d.Step, &d.ID.Partition, &d.ID.UUID, &d.State)
		return d, err
	})
	return ds, wrap("read the downstreams of "+up.String(), err)
}
