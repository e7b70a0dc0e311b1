package store

import (
	"context"
	"slices"
	"strconv"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Dispatching is a completion event taken for dispatch: locked, and marked
// dispatched in the same statement.
type Dispatching struct {
	EventID     int64
	Partition   int16
	ExecutionID *uuid.UUID // nil for a flow's own event
	FlowID      *uuid.UUID // nil for an execution outside any flow
	Outcome     ffdtype.Outcome
	// Age is the event's age at dispatch, from its insertion, by the
	// database clock.
	Age time.Duration
}

// takeEvents wraps a query selecting events to take (their partition_key
// and event_id): it locks them and marks them dispatched in the same
// statement, one round trip for both. The mark commits with the rest of
// the dispatch or not at all, so marking first is as safe as marking
// last. Events held by another dispatcher are skipped: whoever holds one
// finishes it, or rolls back and leaves it to the sweep.
//
// The statement also sets the transaction's lock_timeout (its
// next-to-last parameter, in milliseconds; NULL keeps the session's), so
// that the rest of the dispatch waits for a lock at most that long
// without a statement of its own (on a distributed Postgres, takeWith
// sets it with statements of its own instead); and it sets the transaction's
// plan_cache_mode (its last parameter, text; NULL keeps the session's):
// takeWith says which. With a plan mode it also plans the rest of the
// dispatch by index, as hotPlansSQL does (each of its statements reads
// events, edges, groups, executions and flows by key).
//
// It marks with now() and returns the time it read with it, from which the
// caller computes each event's age: a distributed Postgres refuses a
// volatile function in an UPDATE and any but an immutable one in its
// RETURNING. The take is its transaction's first statement, so now() is
// when it ran, within the BEGIN before it.
//
// A statement whose pick names the partitions of one shard (partParam, a
// parameter holding them, or one; "" for none) names them in the UPDATE
// too: a CTE that locks rows is not inlined, so a distributed Postgres
// runs it first and joins the UPDATE to its result, and an UPDATE that
// names no partition of its own runs on every shard under a shard lock
// that admits one such statement at a time (every dispatcher queued
// behind one, and, while a frozen one held it, lock timeouts).
func takeEvents(pick, timeoutParam, plansParam, partParam string) string {
	narrow := ""
	if partParam != "" {
		narrow = " AND c.partition_key = " + partParam
	}
	return `WITH picked AS (` + pick + `),
		wait AS (SELECT (` + setLockTimeout(timeoutParam) + `) AS lock_timeout,
			set_config('plan_cache_mode', coalesce(` + plansParam + `::text, current_setting('plan_cache_mode')), true) AS plans` +
		offScans(byIndex(plansParam)) + `,
			now() AS at)
		UPDATE ff_completion_event c SET dispatched_at = now()
		FROM picked p, wait w
		WHERE c.partition_key = p.partition_key AND c.event_id = p.event_id` + narrow + `
		RETURNING c.event_id, c.partition_key, c.execution_id, c.flow_id, c.outcome, c.occurred_at, w.at`
}

// byIndex is, for offScans, the value that turns a scan off where plans
// (a parameter) is set, and keeps the session's where it is NULL.
func byIndex(plans string) func(setting string) string {
	return func(setting string) string {
		return `CASE WHEN ` + plans + `::text IS NULL THEN current_setting('` + setting + `') ELSE 'off' END`
	}
}

var (
	takeEventsByID = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE event_id = ANY($1) AND dispatched_at IS NULL
		ORDER BY event_id
		FOR NO KEY UPDATE SKIP LOCKED`, "$2", "$3", "")
	takeEventByKey = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE partition_key = $1 AND event_id = $2 AND dispatched_at IS NULL
		FOR NO KEY UPDATE SKIP LOCKED`, "$3", "$4", "$1")
	// ff_completion_event_undispatched_by_partition (migration 00024) holds
	// exactly the rows this reads, by partition.
	takePartitionEvents = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE partition_key = ANY($1) AND dispatched_at IS NULL
		ORDER BY event_id
		LIMIT $2
		FOR NO KEY UPDATE SKIP LOCKED`, "$3", "$4", "")
	// takeShardEvents is takePartitionEvents of the partitions of one
	// shard, as a distributed Postgres routes it.
	takeShardEvents = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE partition_key = ANY($1::smallint[]) AND dispatched_at IS NULL
		ORDER BY event_id
		LIMIT $2
		FOR NO KEY UPDATE SKIP LOCKED`, "$3", "$4", "ANY($1::smallint[])")
	takeShardOldEvents = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE partition_key = ANY($1::smallint[]) AND dispatched_at IS NULL
			AND occurred_at <= clock_timestamp() - $3::bigint * interval '1 microsecond'
		ORDER BY event_id
		LIMIT $2
		FOR NO KEY UPDATE SKIP LOCKED`, "$4", "$5", "ANY($1::smallint[])")
	takeOldEvents = takeEvents(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE dispatched_at IS NULL AND occurred_at <= clock_timestamp() - $2::bigint * interval '1 microsecond'
		ORDER BY event_id
		LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED`, "$3", "$4", "")
)

// TakeEvents takes the given completion events that are still
// undispatched and not held by another dispatcher, and bounds the
// transaction's lock waits by lockTimeout (0: the session's).
func TakeEvents(ctx context.Context, tx pgx.Tx, ids []int64, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takeEventsByID, ids, millisOrNull(lockTimeout))
}

// TakeEvent is TakeEvents of one event named by its partition and id: a
// statement a distributed Postgres routes to the event's shard.
func TakeEvent(ctx context.Context, tx pgx.Tx, part int16, id int64, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takeEventByKey, part, id, millisOrNull(lockTimeout))
}

// TakePartitionEvents takes up to limit undispatched events of the given
// partitions not held by another dispatcher, oldest first, bounding the
// transaction's lock waits like TakeEvents.
func TakePartitionEvents(ctx context.Context, tx pgx.Tx, parts []int16, limit int, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takePartitionEvents, parts, limit, millisOrNull(lockTimeout))
}

// TakeShardEvents is TakePartitionEvents of the partitions of one shard
// (ShardsOf) in the form a distributed Postgres routes to that shard.
func TakeShardEvents(ctx context.Context, tx pgx.Tx, parts []int16, limit int, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takeShardEvents, parts, limit, millisOrNull(lockTimeout))
}

// OldEventPartitions lists the partitions of the oldest undispatched
// events at least grace old (up to limit events), oldest first, without
// locking: where a distributed Postgres's sweep dispatches, one shard per
// transaction (ShardsOf, TakeShardEventsOlder).
func OldEventPartitions(ctx context.Context, db DB, limit int, grace time.Duration) ([]int16, error) {
	rows, err := db.Query(ctx, `SELECT partition_key FROM ff_completion_event
		WHERE dispatched_at IS NULL AND occurred_at <= clock_timestamp() - $2::bigint * interval '1 microsecond'
		ORDER BY event_id LIMIT $1`, limit, micros(grace))
	if err != nil {
		return nil, wrap("find undispatched events", err)
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[int16])
	if err != nil {
		return nil, wrap("find undispatched events", err)
	}
	var out []int16
	for _, p := range parts {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// TakeShardEventsOlder is TakeShardEvents of events at least grace old.
func TakeShardEventsOlder(ctx context.Context, tx pgx.Tx, parts []int16, limit int, grace, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takeShardOldEvents, parts, limit, micros(grace), millisOrNull(lockTimeout))
}

// TakeOldEvents takes up to limit undispatched events at least grace old,
// oldest first, bounding the transaction's lock waits like TakeEvents.
// The grace keeps the sweep from racing the notification driven dispatch
// of events that just committed.
func TakeOldEvents(ctx context.Context, tx pgx.Tx, limit int, grace, lockTimeout time.Duration) ([]Dispatching, error) {
	return takeWith(ctx, tx, takeOldEvents, limit, micros(grace), millisOrNull(lockTimeout))
}

// takeWith runs a take statement with args, its lock timeout (a *string)
// last, then the plan mode it sets for the rest of its transaction. On
// one Postgres, generic plans, as a claim has: planned afresh for each
// call, the statements after the take took 0.1-0.6 ms each to plan
// against 0.04-0.4 ms to run (pg_stat_statements, the hop bench), two
// thirds of a hop's dispatch. On a distributed one, the session's (nil):
// Citus cannot plan some of them without their values ("could not create
// distributed plan"); and there the lock timeout is set by statements of
// its own, sent with the take in one round trip (queueRoutedLockTimeout).
func takeWith(ctx context.Context, tx pgx.Tx, sql string, args ...any) ([]Dispatching, error) {
	dist, err := Distributed(ctx, tx)
	if err != nil {
		return nil, err
	}
	if !dist {
		generic := "force_generic_plan"
		return collectDispatching(tx.Query(ctx, sql, append(args, &generic)...))
	}
	last := len(args) - 1
	ms, _ := args[last].(*string)
	b := &pgx.Batch{}
	queueRoutedLockTimeout(b, ms)
	var out []Dispatching
	// The take's own timeout and plan mode: the session's.
	b.Queue(sql, append(slices.Clone(args[:last]), nil, nil)...).Query(func(rows pgx.Rows) error {
		var err error
		out, err = collectDispatching(rows, nil)
		return err
	})
	return out, tx.SendBatch(ctx, b).Close()
}

// setLockTimeout is a one-row SELECT that sets the transaction's
// lock_timeout to the text parameter param (milliseconds), or leaves the
// session's when param is NULL: a CTE that lets a statement bound the
// waits of the statements after it, without a statement of its own.
func setLockTimeout(param string) string {
	return `SELECT CASE WHEN ` + param + `::text IS NOT NULL
			THEN set_config('lock_timeout', ` + param + `::text, true) END AS lock_timeout`
}

// queueRoutedLockTimeout queues into b what bounds its transaction's lock
// waits at ms milliseconds (nil: the session's) on a distributed
// Postgres. There a statement waits for row locks on the transaction's
// connections to the nodes that hold the rows, which a setting of the
// session the client talks to does not reach: with set_config there, a
// completion behind a locked row waited until its statement timeout (4 s
// where 500 ms was asked, on Citus 13). SET LOCAL does reach them once
// the transaction's citus.propagate_set_commands is 'local': Citus sends
// it on each such connection. On one Postgres (the routed form in tests)
// the two statements set what set_config would.
func queueRoutedLockTimeout(b *pgx.Batch, ms *string) {
	if ms == nil {
		return
	}
	b.Queue(`SET LOCAL citus.propagate_set_commands TO 'local'`)
	// ms holds digits only (millisOrNull), so it goes into the text as is:
	// SET takes no parameters.
	b.Queue(`SET LOCAL lock_timeout = '` + *ms + `ms'`)
}

// millisOrNull is a lock_timeout setting: d in whole milliseconds (at
// least 1), or nil for 0.
func millisOrNull(d time.Duration) *string {
	if d <= 0 {
		return nil
	}
	ms := strconv.FormatInt(max(d.Milliseconds(), 1), 10)
	return &ms
}

func collectDispatching(rows pgx.Rows, err error) ([]Dispatching, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Dispatching, error) {
		var d Dispatching
		var occurred, at time.Time
		err := r.Scan(&d.EventID, &d.Partition, &d.ExecutionID, &d.FlowID, &d.Outcome, &occurred, &at)
		d.Age = max(at.Sub(occurred), 0)
		return d, err
	})
}

// DispatchLag is how long the oldest undispatched completion event has
// waited (0 when none waits), by the database's clock. It reads one row
// of the partial index of undispatched events, so it costs the same
// however large the backlog.
func DispatchLag(ctx context.Context, db DB) (time.Duration, error) {
	var us int64
	err := db.QueryRow(ctx, `SELECT coalesce((
		SELECT (extract(epoch FROM clock_timestamp() - occurred_at) * 1e6)::bigint
		FROM ff_completion_event WHERE dispatched_at IS NULL ORDER BY event_id LIMIT 1), 0)`).Scan(&us)
	return time.Duration(max(us, 0)) * time.Microsecond, wrap("read the dispatch lag", err)
}
