package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/pool"

	"github.com/flowfabric/ffd/ffdtype"
)

// Termination asks Terminate to end one execution.
type Termination struct {
	ID ffdtype.ExecutionID
	// Epoch fences the ending: when non-zero the execution must be running
	// at exactly this epoch (complete, fail, lease expiry); when zero any
	// non-terminal state will do (cancel, skip, deadline).
	Epoch  int64
	State  ffdtype.State // completed, failed, cancelled, skipped or expired
	Result []byte        // completed only
	Error  string        // failed, expired: recorded on the attempt and as last_error
	Reason string        // cancelled: cancellation_reason
	By     string        // cancelled: cancelled_by
	// Solo says the caller knows the execution belongs to no flow: its
	// completion event is born dispatched, and the daemon is not asked
	// to look for it (the outbox's consumers are woken all the same). On
	// a distributed Postgres, endings all Solo are one implicit
	// transaction that finishes no flow: a member said Solo has its flow
	// finished in a second transaction.
	Solo bool
	// Locked, when set, is the execution's row as the caller's
	// transaction read it while locking it (Locks.Members), a lock it
	// still holds. An unfenced batch whose endings all have it updates
	// its rows straight from what it says (terminateLockedSQL), without
	// locking and reading them again. Ignored on a distributed Postgres.
	Locked *LockedRow
}

// LockedRow is what an ending needs to know of an execution's row that
// its transaction holds locked: the state, lease epoch and lease expiry
// it read under the lock, which nothing else can change until it ends.
type LockedRow struct {
	State          ffdtype.State
	LeaseEpoch     int64
	LeaseExpiresAt *time.Time
}

// Ended is one execution Terminate ended.
type Ended struct {
	ID         ffdtype.ExecutionID
	FlowID     *uuid.UUID
	State      ffdtype.State
	Attempt    int
	LeaseEpoch int64 // after the ending (bumped when a running lease was fenced)
	WasRunning bool
	EventID    int64 // its completion event
}

// The parts of terminateSQL and terminateRoutedSQL that are the same:
// the ending's columns, what it returns, and the events it writes.
const (
	terminateSet = `
		state = l.to_state,
		terminal_at = now(),
		result = CASE WHEN l.to_state = 'completed' THEN coalesce(l.result, '') END,
		last_error = coalesce(l.error, e.last_error),
		cancellation_reason = CASE WHEN l.to_state = 'cancelled' THEN l.reason END,
		cancelled_by = CASE WHEN l.to_state = 'cancelled' THEN l.by_whom END,
		lease_epoch = e.lease_epoch + CASE WHEN l.old_state = 'running'
			AND l.to_state IN ('cancelled', 'expired') THEN 1 ELSE 0 END,
		lease_owner = NULL, lease_expires_at = NULL, attempt_deadline_at = NULL`
	terminateReturning = `
	RETURNING e.partition_key, e.execution_id, e.flow_id, e.namespace, e.attempt, e.lease_epoch,
		e.state, e.step, e.attempt_worker, l.old_state, l.lease_expired_at, l.outcome, l.lease_end`
	// The lease event of a running lease taken away (revoked, expired):
	// the epoch of the lease that ended, the one before the bump.
	terminateLeaseEvents = `lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
	SELECT partition_key, execution_id, lease_epoch - 1, attempt, attempt_worker, lease_end, lease_expired_at
	FROM upd
	WHERE old_state = 'running' AND lease_end IN ('revoked', 'expired')
), `
	terminateCompletionEvents = `ended AS (
	-- Each ended execution's event id is drawn here, so that neither the
	-- event rows nor the answer need a join between CTEs (which the
	-- planner, estimating one row each, runs as a nested loop: quadratic
	-- in the batch).
	SELECT u.*, nextval('ff_outbox_event_id_seq') AS event_id FROM upd u
), cev AS (
	-- An execution outside any flow has nothing to cascade: its event is
	-- born dispatched (migration 00004).
	INSERT INTO ff_completion_event (event_id, partition_key, execution_id, flow_id, outcome, attempt, namespace, dispatched_at, step)
	SELECT event_id, partition_key, execution_id, flow_id, outcome, attempt, namespace,
		CASE WHEN flow_id IS NULL THEN now() END, step
	FROM ended`
	terminateEvents = terminateLeaseEvents + terminateCompletionEvents
)

// terminateSQL ends a batch of executions in one statement. For each input
// row that is still non-terminal (and running at the given epoch when one
// is given) it:
//   - sets the terminal state, clears the lease, and bumps lease_epoch when
//     a running lease is taken away (cancel, expiry) so its holder is fenced;
//   - leaves the running attempt on the row, where ff_attempt_all reads it
//     ended (terminal_at, the terminal state): no attempt row is written;
//   - writes the lease event of a running lease taken away (revoked,
//     expired), with the expiry it had; a lease its holder gives up
//     (complete, fail) writes none;
//   - writes the one completion event;
//   - locks the open flows of the members it ended (after the members: the
//     global lock order) and hands their ids to the statement that
//     finishes them (queueFinishFlows), in two transaction-local settings.
//
// The settings spare the finishing statement a second look at every input
// row: a batch of solo executions locks no flow, and its finishing
// statement reads an empty list.
//
// The outcome and lease event of each ending come from the store's
// mappings (OutcomeOf, LeaseEndOf), passed per row; the held attempt's
// outcome is AttemptOutcomeOf the state, as ff_attempt_all maps it.
//
// Rows are locked in (partition_key, execution_id) order, the global lock
// order, so concurrent batches cannot deadlock on each other.
//
// Cross-partition when the batch is: one execution's ending touches its
// partition alone; a worker's grouped completions touch one partition per
// execution (a multi-shard transaction on a distributed Postgres).
var terminateSQL = `
WITH input AS (
	SELECT * FROM ` + terminateInput + `
), locked AS (
	SELECT e.partition_key, e.execution_id, e.state AS old_state, e.lease_expires_at AS lease_expired_at,
		i.to_state, i.result, i.error, i.reason, i.by_whom, i.outcome, i.lease_end
	FROM ff_execution e
	JOIN input i ON i.partition_key = e.partition_key AND i.execution_id = e.execution_id
	WHERE e.state IN ('blocked', 'pending', 'running')
		AND (i.epoch = 0 OR (e.state = 'running' AND e.lease_epoch = i.epoch))
		AND (i.to_state <> 'skipped' OR e.state = 'blocked')
	ORDER BY e.partition_key, e.execution_id
	FOR NO KEY UPDATE OF e
), upd AS (
	UPDATE ff_execution e SET
` + terminateSet + `
	FROM locked l
	WHERE e.partition_key = l.partition_key AND e.execution_id = l.execution_id
` + terminateReturning + `
), ` + terminateEvents + terminateFlows

// terminateHeldSQL is terminateSQL for endings by their lease's holder
// only (heldEndings: completed or failed at the epoch it holds), the
// worker's completions. Their old state is known (running: the fence
// requires it) and they write no lease event, so the update needs no
// step that locks the rows first to read them: it updates them straight
// from its input, which saves a row lock (a WAL record and a buffer
// write) per execution, 10-15% of the statement (docs/benchmarks.md).
//
// The rows are still updated in the global lock order: the input is
// sorted, and on its generic plan (TerminateWithin sets it) the update
// is a nested loop driven by the sorted input, one index probe per row.
// Statistics that take the table for empty (gathered over deleted rows)
// may make it a merge join on the key with a full scan of the table: in
// the lock order still, and slow until the daemon's statistician
// refreshes them (migration 00038). TestTerminatePlanSurvivesStatistics
// holds the plan to those shapes.
// Under READ COMMITTED a row another transaction changed meanwhile is
// waited for and its newest version re-tested against the fence, as
// the lock did.
var terminateHeldSQL = terminateDirect(`i.*, 'running'::text AS old_state, NULL::timestamptz AS lease_expired_at
	FROM `+terminateInput, "l.epoch", terminateCompletionEvents)

// terminateLockedSQL is terminateSQL for unfenced endings of rows the
// caller's transaction locked and read (Termination.Locked: cancel_flow's
// members), their old state, epoch and lease expiry given per row ($11,
// $12, $13). It need not lock the rows, nor read them but to update them;
// an input row that is not live, or a skip of a row not blocked, ends
// nothing, as in terminateSQL.
var terminateLockedSQL = terminateDirect(`i.*
	FROM unnest(`+terminateInputArrays+`, $11::text[], $12::bigint[], $13::timestamptz[])
		AS i(`+terminateInputColumns+`, old_state, locked_epoch, lease_expired_at)
	WHERE i.old_state IN ('blocked', 'pending', 'running') AND (i.to_state <> 'skipped' OR i.old_state = 'blocked')`,
	"l.locked_epoch", terminateEvents)

// terminateDirect is an ending that updates its rows straight from its
// input (terminateHeldSQL, terminateLockedSQL), which gives each row's
// old state and lease expiry (old_state, lease_expired_at) and the epoch
// it must be at.
func terminateDirect(input, epoch, events string) string {
	return `
WITH input AS (
	SELECT ` + input + `
	ORDER BY i.partition_key, i.execution_id
), upd AS (
	UPDATE ff_execution e SET
` + terminateSet + `
	FROM input l
	WHERE e.partition_key = l.partition_key AND e.execution_id = l.execution_id
		-- The state is tested against the input's column, not against
		-- a constant: as a test of ff_execution alone the planner would
		-- size it by the statistics of the states, and when they said
		-- nothing was running it read every running row and ran the
		-- input through that (a merge join, or a nested loop with the
		-- input inside: out of the lock order too).
		AND e.state = l.old_state AND e.lease_epoch = ` + epoch + `
` + terminateReturning + `
), ` + events + terminateFlows
}

// terminateInput is the endings terminateSQL, terminateHeldSQL and the
// routed ending take (terminationArgs).
const terminateInput = `unnest(` + terminateInputArrays + `)
		AS i(` + terminateInputColumns + `)`

// The arrays of terminationArgs and the input columns they make.
const (
	terminateInputArrays = `$1::smallint[], $2::uuid[], $3::bigint[], $4::text[], $5::bytea[],
		$6::text[], $7::text[], $8::text[], $9::text[], $10::text[]`
	terminateInputColumns = `partition_key, execution_id, epoch, to_state, result, error, reason, by_whom,
			outcome, lease_end`
)

// terminateFlows ends terminateSQL and terminateDirect's: the open flows
// of what they ended locked and handed over, and the endings returned.
var terminateFlows = `
), flows AS (
	SELECT f.partition_key, f.flow_id
	FROM (SELECT DISTINCT partition_key, flow_id FROM upd WHERE flow_id IS NOT NULL) u
	JOIN ff_flow f ON f.partition_key = u.partition_key AND f.flow_id = u.flow_id
	WHERE f.state = 'open'
	ORDER BY f.partition_key, f.flow_id
	FOR NO KEY UPDATE OF f
), handoff AS (
	SELECT set_config('` + endedFlowPartitions + `', coalesce(array_agg(partition_key)::text, '{}'), true),
		set_config('` + endedFlowIDs + `', coalesce(array_agg(flow_id)::text, '{}'), true)
	FROM flows
)
-- The handoff is a one-time filter, so it runs (and replaces what an
-- earlier ending in the same transaction handed over) even when nothing
-- ended.
SELECT partition_key, execution_id, flow_id, state, attempt, lease_epoch, old_state = 'running', event_id
FROM ended
WHERE (SELECT count(*) FROM handoff) = 1`

// The settings through which terminateSQL hands the flows it locked to
// finishFlowsSQL, local to the transaction.
const (
	endedFlowPartitions = "ffd.ended_flow_partitions"
	endedFlowIDs        = "ffd.ended_flow_ids"
)

// terminateRoutedSQL is terminateSQL for the partitions of one shard
// ($11) of a distributed Postgres, which routes a statement only when
// every table in it is narrowed to one shard and which reads wrong a CTE's rows
// shipped to the shard for an UPDATE there. So the rows are locked by a
// subquery of the UPDATE itself (the subquery's row versions are what the
// UPDATE saw: the old state and lease expiry), and the event inserts
// select from the UPDATE's result, which the coordinator holds (it draws
// the event ids there too). The flows of what it ended are finished by
// the caller afterwards (finishFlowsRoutedSQL), naming them: a
// transaction setting would be set on the node holding the shard.
//
// terminateRoutedSQL writes lease events; terminateRoutedNoLeaseSQL is
// the same for endings that take no running lease away (a worker's
// completions and failures, which give theirs up): on a distributed
// Postgres every CTE of a statement is a step of its own through the
// node it runs on, one that writes no row too (13% of the statement's
// time for 75 completions of one shard).
var (
	terminateRoutedSQL        = terminateRoutedStatement(true)
	terminateRoutedNoLeaseSQL = terminateRoutedStatement(false)
)

// terminateRoutedUpdateSQL is the routed ending's update of the
// executions, which terminateRoutedStatement wraps with its events.
const terminateRoutedUpdateSQL = `
	UPDATE ff_execution e SET
` + terminateSet + `
	FROM (
		SELECT x.partition_key, x.execution_id, x.state AS old_state, x.lease_expires_at AS lease_expired_at,
			i.to_state, i.result, i.error, i.reason, i.by_whom, i.outcome, i.lease_end
		FROM ff_execution x
		JOIN ` + terminateInput + `
			ON i.partition_key = x.partition_key AND i.execution_id = x.execution_id
		WHERE x.partition_key = ANY($11::smallint[]) AND x.state IN ('blocked', 'pending', 'running')
			AND (i.epoch = 0 OR (x.state = 'running' AND x.lease_epoch = i.epoch))
			AND (i.to_state <> 'skipped' OR x.state = 'blocked')
		ORDER BY x.partition_key, x.execution_id
		FOR NO KEY UPDATE OF x
	) l
	WHERE e.partition_key = ANY($11::smallint[]) AND e.partition_key = l.partition_key
		AND e.execution_id = l.execution_id
` + terminateReturning

// terminateRoutedStatement is the routed ending, with or without its
// lease events.
func terminateRoutedStatement(leaseEvents bool) string {
	events := terminateCompletionEvents
	if leaseEvents {
		events = terminateLeaseEvents + events
	}
	return `
WITH upd AS (` + terminateRoutedUpdateSQL + `
), ` + events + `
)
SELECT partition_key, execution_id, flow_id, state, attempt, lease_epoch, old_state = 'running', event_id
FROM ended`
}

// The flows a routed ending ended members of, finished on their
// partition ($1) by name ($2): locked first, then counted in a statement
// of its own (a fresh snapshot, as queueFinishFlows explains).
const (
	lockFlowsRoutedSQL = `SELECT flow_id FROM ff_flow
		WHERE partition_key = $1 AND flow_id = ANY($2::uuid[]) AND state = 'open'
		ORDER BY flow_id FOR NO KEY UPDATE`
	finishFlowsRoutedSQL = `
WITH done AS (
	UPDATE ff_flow f SET
		state = CASE WHEN EXISTS (SELECT 1 FROM ff_execution e
				WHERE e.partition_key = $1 AND e.flow_id = f.flow_id
					AND e.state IN ('failed', 'expired'))
			THEN 'failed' ELSE 'completed' END,
		terminal_at = now(), updated_at = now()
	WHERE f.partition_key = $1 AND f.flow_id = ANY($2::uuid[]) AND f.state = 'open'
		AND NOT EXISTS (SELECT 1 FROM ff_execution e
			WHERE e.partition_key = $1 AND e.flow_id = f.flow_id
				AND e.state IN ('blocked', 'pending', 'running'))
	RETURNING f.partition_key, f.flow_id, f.state, f.namespace
)
INSERT INTO ff_completion_event (partition_key, flow_id, outcome, namespace, dispatched_at)
SELECT partition_key, flow_id, state, namespace, now() FROM done`
)

// Terminate ends every execution of ends that is still eligible (see
// Ending.Epoch), in one statement, and returns those it ended; the others
// it leaves untouched, for the caller to explain. It is the only writer of
// execution completion events.
func Terminate(ctx context.Context, db DB, ends []Termination) ([]Ended, error) {
	return TerminateWithin(ctx, db, ends, 0)
}

// TerminateWithin is Terminate whose row-lock waits are bounded by lockTimeout
// (0: the session's lock_timeout), for callers that would rather retry a
// contended item on its own than wait with a whole batch behind it.
func TerminateWithin(ctx context.Context, db DB, ends []Termination, lockTimeout time.Duration) ([]Ended, error) {
	if len(ends) == 0 {
		return nil, nil
	}
	for _, e := range ends {
		if !e.State.Terminal() {
			return nil, fmt.Errorf("terminate %s: %q is not a terminal state", e.ID, e.State)
		}
	}
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, err
	}
	if dist {
		return terminateRouted(ctx, db, ends, lockTimeout)
	}
	notices := terminationNotices(ends)
	// In the batch's own transaction, endings all by their holders go on
	// their generic plan (terminateHeldSQL), by index (hotPlansSQL), and
	// so does the finishing of their flows; the settings would outlive
	// the batch in a caller's transaction.
	sql, args, held := terminateSQL, terminationArgs(ends), !inCallerTx(db) && heldEndings(ends)
	switch {
	case held:
		sql = terminateHeldSQL
	case lockedEndings(ends):
		sql, args = terminateLockedSQL, append(args, lockedArgs(ends)...)
	}
	// One round trip: the statements go as one pipelined batch, which
	// Postgres runs as one transaction (or inside the caller's).
	var out []Ended
	err = WithRetry(ctx, db, func() error {
		out = out[:0]
		b := &pgx.Batch{}
		if ms := millisOrNull(lockTimeout); ms != nil {
			// Local to the batch's transaction (the batch is one implicit
			// transaction, or the caller's).
			b.Queue(`SELECT set_config('lock_timeout', $1, true)`, *ms)
		}
		if held {
			b.Queue(hotPlansSQL)
		}
		// An unfenced ending (cancel, skip, deadline) can race a claim: it
		// waits for the claim's row lock, then reads the row as the claim
		// left it (READ COMMITTED re-checks a locked row's newest version),
		// attempt included, since the attempt is on the row.
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			var err error
			out, err = scanEnded(rows)
			return err
		})
		queueFinishFlows(b)
		notices.Queue(b)
		return db.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return nil, wrap(fmt.Sprintf("terminate %d executions", len(ends)), unroutable(db, err))
	}
	return out, nil
}

// heldEndings says whether every ending of ends is by its lease's holder:
// completed or failed, fenced at the epoch it holds. Those alone give
// their lease up, so they neither change an epoch nor write a lease
// event.
func heldEndings(ends []Termination) bool {
	for _, e := range ends {
		if e.Epoch == 0 || (e.State != ffdtype.StateCompleted && e.State != ffdtype.StateFailed) {
			return false
		}
	}
	return true
}

// lockedEndings says whether every ending of ends is unfenced and of a
// row its transaction holds locked (Termination.Locked).
func lockedEndings(ends []Termination) bool {
	for _, e := range ends {
		if e.Epoch != 0 || e.Locked == nil {
			return false
		}
	}
	return true
}

// lockedArgs are terminateLockedSQL's parameters beyond terminationArgs:
// each row's state, lease epoch and lease expiry as its lock read them.
func lockedArgs(ends []Termination) []any {
	states, epochs, expiries := make([]string, len(ends)), make([]int64, len(ends)), make([]*time.Time, len(ends))
	for i, e := range ends {
		states[i], epochs[i], expiries[i] = string(e.Locked.State), e.Locked.LeaseEpoch, e.Locked.LeaseExpiresAt
	}
	return []any{states, epochs, expiries}
}

// terminationNotices are the notices ends owe.
func terminationNotices(ends []Termination) *Notices {
	notices := &Notices{}
	for _, e := range ends {
		notices.Completions(e.ID.Partition, !e.Solo)
		if takesLease(e.State) {
			// A running lease taken away: its holder is told, and the
			// lease event's consumers woken. An unfenced ending (epoch
			// 0) leaves no attempt after it, so "whichever runs" is
			// exact.
			notices.Revoked(e.ID, e.Epoch)
			notices.LeaseEvents(e.ID.Partition)
		}
	}
	return notices
}

// terminationArgs are terminateSQL's parameters for ends: per ending its
// key, fence, target state and attribution, and the outcome and lease
// event the store's mappings give its state.
func terminationArgs(ends []Termination) []any {
	n := len(ends)
	parts, ids, epochs := make([]int16, n), make([]pgtype.UUID, n), make([]int64, n)
	states, results := make([]string, n), make([][]byte, n)
	errs, reasons, bys := make([]*string, n), make([]*string, n), make([]*string, n)
	outcomes, leaseEnds := make([]string, n), make([]string, n)
	for i, e := range ends {
		parts[i], ids[i], epochs[i], states[i], results[i] = e.ID.Partition, pgUUID(e.ID.UUID), e.Epoch, string(e.State), e.Result
		errs[i], reasons[i], bys[i] = nullIfEmpty(e.Error), nullIfEmpty(e.Reason), nullIfEmpty(e.By)
		outcomes[i], leaseEnds[i] = string(ffdtype.OutcomeOf(e.State)), string(LeaseEndOf(e.State))
	}
	return []any{parts, ids, epochs, states, results, errs, reasons, bys, outcomes, leaseEnds}
}

// terminateRouted is TerminateWithin on a distributed Postgres: one
// statement per shard (byShard). In a caller's transaction they go in one
// pipelined batch there. In its own, each shard's ending is a transaction
// of its own (terminateShards): a transaction that writes one shard
// commits on the node that holds it, in one phase.
func terminateRouted(ctx context.Context, db DB, ends []Termination, lockTimeout time.Duration) ([]Ended, error) {
	groups, err := byShard(ctx, db, ends, func(e Termination) int16 { return e.ID.Partition })
	if err != nil {
		return nil, err
	}
	if inCallerTx(db) || len(groups) == 1 {
		out, err := terminateGroups(ctx, db, groups, lockTimeout)
		if err != nil {
			return nil, wrap(fmt.Sprintf("terminate %d executions", len(ends)), err)
		}
		return out, nil
	}
	return terminateShards(ctx, db, groups, lockTimeout)
}

// terminateShards ends each shard's group in a transaction of its own,
// with the notices of its own endings; on a pool, up to shardWriters
// groups at once (each transaction holds one connection and the locks of
// one shard, so they cannot wait on each other). An error after some
// groups committed returns it alone: an ending is fenced, so a caller
// that retries the whole batch finds those ended already (as a repeat).
func terminateShards(ctx context.Context, db DB, groups []shardGroup[Termination], lockTimeout time.Duration) ([]Ended, error) {
	ended := make([][]Ended, len(groups))
	errs := make([]error, len(groups))
	one := func(i int) {
		g := groups[i]
		var err error
		if ended[i], err = terminateGroups(ctx, db, []shardGroup[Termination]{g}, lockTimeout); err != nil {
			errs[i] = wrap(fmt.Sprintf("terminate %d executions on the shard of partition %d", len(g.items), g.parts[0]), err)
		}
	}
	eachGroup(db, len(groups), one)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return slices.Concat(ended...), nil
}

// shardWriters bounds the shards one batch of endings (or of renewals)
// writes at once.
const shardWriters = 4

// eachGroup runs one(i) for each of n shard groups, each its own
// transaction: on a pool up to shardWriters at once (each holds one
// connection and the locks of one shard, so they cannot wait on each
// other), on one connection one after another.
func eachGroup(db DB, n int, one func(i int)) {
	if _, ok := db.(*pgxpool.Pool); !ok || n < 2 {
		for i := range n {
			one(i)
		}
		return
	}
	p := pool.New().WithMaxGoroutines(shardWriters)
	for i := range n {
		p.Go(func() { one(i) })
	}
	p.Wait()
}

// terminateGroups ends groups in one transaction (db's own, or the
// caller's): their statements in one pipelined batch with the notices
// their endings owe, then, when members of flows ended, a second batch
// that finishes their flows. Endings the caller knows are of no flow
// finish no flow: in a transaction of their own the batch alone is it
// (one round trip, as on one Postgres, where BEGIN and COMMIT were two
// more).
func terminateGroups(ctx context.Context, db DB, groups []shardGroup[Termination], lockTimeout time.Duration) ([]Ended, error) {
	var items []Termination
	for _, g := range groups {
		items = append(items, g.items...)
	}
	notices := terminationNotices(items)
	var out []Ended
	batch := func() *pgx.Batch {
		out = out[:0]
		b := &pgx.Batch{}
		queueRoutedLockTimeout(b, millisOrNull(lockTimeout))
		for _, g := range groups {
			b.Queue(routedEnding(g.items), append(terminationArgs(g.items), g.parts)...).Query(func(rows pgx.Rows) error {
				ended, err := scanEnded(rows)
				out = append(out, ended...)
				return err
			})
		}
		notices.Queue(b)
		return b
	}
	if !inCallerTx(db) && !slices.ContainsFunc(items, func(e Termination) bool { return !e.Solo }) {
		send := func() error { return db.SendBatch(ctx, batch()).Close() }
		if lockTimeout > 0 {
			// SET LOCAL (queueRoutedLockTimeout) holds only in a
			// transaction block: BEGIN and COMMIT go in the same batch.
			send = func() error {
				return pipelinedTx(ctx, db, func(_, last func(*pgx.Batch) error) error { return last(batch()) })
			}
		}
		if len(groups) == 1 && routedEnding(items) == terminateRoutedNoLeaseSQL {
			send = func() error {
				var err error
				out, err = terminateSplit(ctx, db, groups[0], lockTimeout, notices)
				return err
			}
		}
		if err := WithRetry(ctx, db, send); err != nil {
			return nil, err
		}
		if !slices.ContainsFunc(out, func(e Ended) bool { return e.FlowID != nil }) {
			return out, nil
		}
		// A caller said Solo of a flow's member: its flow is finished
		// after all, in a transaction of its own.
		return out, InTx(ctx, db, func(tx pgx.Tx) error { return finishFlowsRouted(ctx, tx, out) })
	}
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		if err := tx.SendBatch(ctx, batch()).Close(); err != nil {
			return err
		}
		return finishFlowsRouted(ctx, tx, out)
	})
	return out, err
}

// routedEnding is the routed ending for items: without lease events
// when none of them takes a lease away.
func routedEnding(items []Termination) string {
	if slices.ContainsFunc(items, func(e Termination) bool { return takesLease(e.State) }) {
		return terminateRoutedSQL
	}
	return terminateRoutedNoLeaseSQL
}

// takesLease says an ending in state takes a running lease away from its
// holder (revoked, expired), where one is held: a lease event's worth.
func takesLease(s ffdtype.State) bool {
	le := LeaseEndOf(s)
	return le == LeaseRevoked || le == LeaseExpired
}

// finishFlowsRouted finishes, partition by partition, the open flows of
// the members ended that have no live member left.
func finishFlowsRouted(ctx context.Context, tx pgx.Tx, ended []Ended) error {
	flows := map[int16][]uuid.UUID{}
	var order []int16
	for _, e := range ended {
		if e.FlowID == nil || slices.Contains(flows[e.ID.Partition], *e.FlowID) {
			continue
		}
		if len(flows[e.ID.Partition]) == 0 {
			order = append(order, e.ID.Partition)
		}
		flows[e.ID.Partition] = append(flows[e.ID.Partition], *e.FlowID)
	}
	if len(order) == 0 {
		return nil
	}
	slices.Sort(order)
	b := &pgx.Batch{}
	for _, p := range order {
		b.Queue(lockFlowsRoutedSQL, p, pgUUIDs(flows[p]))
	}
	for _, p := range order {
		b.Queue(finishFlowsRoutedSQL, p, pgUUIDs(flows[p]))
	}
	return tx.SendBatch(ctx, b).Close()
}

// scanEnded reads terminateSQL's result.
func scanEnded(rows pgx.Rows) ([]Ended, error) {
	var out []Ended
	for rows.Next() {
		var e Ended
		var state string
		if err := rows.Scan(&e.ID.Partition, &e.ID.UUID, &e.FlowID, &state, &e.Attempt, &e.LeaseEpoch, &e.WasRunning, &e.EventID); err != nil {
			return nil, err
		}
		e.State = ffdtype.State(state)
		out = append(out, e)
	}
	return out, rows.Err()
}

// queueFinishFlows ends every open flow whose last live member this batch
// just ended: completed when no member failed or expired, else failed,
// with the flow's own completion event, in the same transaction.
//
// The flows are those terminateSQL locked, the open flows of the members
// it ended, handed over in two transaction-local settings. The members
// are counted in a statement of its own, after the flows' locks: under
// READ COMMITTED it takes a fresh snapshot, so of two transactions ending
// a flow's last two members the second to get the flow's lock sees the
// first's commit. Counting in the statement that took the lock would let
// each see the other's member still running, and the flow would never
// finish. A batch of solo executions hands over no flow, and the
// statement reads nothing.
func queueFinishFlows(b *pgx.Batch) {
	b.Queue(finishFlowsSQL)
}

const finishFlowsSQL = `
WITH ended AS MATERIALIZED (
	SELECT * FROM unnest(
		nullif(current_setting('` + endedFlowPartitions + `', true), '')::smallint[],
		nullif(current_setting('` + endedFlowIDs + `', true), '')::uuid[]) AS i(partition_key, flow_id)
),
done AS (
	UPDATE ff_flow f SET
		state = CASE WHEN EXISTS (SELECT 1 FROM ff_execution e
				WHERE e.partition_key = f.partition_key AND e.flow_id = f.flow_id
					AND e.state IN ('failed', 'expired'))
			THEN 'failed' ELSE 'completed' END,
		terminal_at = now(), updated_at = now()
	WHERE (f.partition_key, f.flow_id) IN (SELECT partition_key, flow_id FROM ended) AND f.state = 'open'
		AND NOT EXISTS (SELECT 1 FROM ff_execution e
			WHERE e.partition_key = f.partition_key AND e.flow_id = f.flow_id
				AND e.state IN ('blocked', 'pending', 'running'))
	RETURNING f.partition_key, f.flow_id, f.state, f.namespace
)
INSERT INTO ff_completion_event (partition_key, flow_id, outcome, namespace, dispatched_at)
SELECT partition_key, flow_id, state, namespace, now() FROM done`

// terminateSplit ends one shard's group of solo executions whose endings
// take no lease away (a worker's completions and failures), on a
// distributed Postgres, without the modifying CTEs of
// terminateRoutedNoLeaseSQL: Citus runs each CTE as a subplan whose rows
// pass through an intermediate result, even in a statement that names
// one shard. Here the update runs alone (a router statement) and the
// completion events are rows of VALUES (a router insert; their ids and
// transaction ids are still drawn on the front door), in one transaction
// of one shard, two round trips (pipelinedTx). On one worker node: claim
// to complete p50 12.8 to 9.7 ms, database time 331 to 259 µs an
// execution (docs/scaling.md).
func terminateSplit(ctx context.Context, db DB, g shardGroup[Termination], lockTimeout time.Duration, notices *Notices) ([]Ended, error) {
	var out []Ended
	err := pipelinedTx(ctx, db, func(first, last func(*pgx.Batch) error) error {
		out = out[:0]
		var evs []splitEvent // evs[i] is out[i]'s event
		b := &pgx.Batch{}
		queueRoutedLockTimeout(b, millisOrNull(lockTimeout))
		b.Queue(terminateRoutedUpdateSQL, append(terminationArgs(g.items), g.parts)...).Query(func(rows pgx.Rows) error {
			var err error
			out, evs, err = scanSplitEnded(rows)
			return err
		})
		if err := first(b); err != nil {
			return err
		}
		b = &pgx.Batch{}
		if len(evs) > 0 {
			at := make(map[uuid.UUID]int, len(out))
			for i, e := range out {
				at[e.ID.UUID] = i
			}
			sql, args := splitEventsInsert(out, evs)
			b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
				var id uuid.UUID
				var event int64
				_, err := pgx.ForEachRow(rows, []any{&id, &event}, func() error {
					out[at[id]].EventID = event
					return nil
				})
				return err
			})
		}
		notices.Queue(b)
		return last(b)
	})
	return out, err
}

// splitEvent is what the completion event of an execution terminateSplit
// ended takes beyond the Ended: its outcome, namespace and step.
type splitEvent struct {
	outcome string
	ns      string
	step    *string
}

// scanSplitEnded reads what terminateRoutedUpdateSQL returns
// (terminateReturning): the endings, and the events they owe.
func scanSplitEnded(rows pgx.Rows) ([]Ended, []splitEvent, error) {
	var out []Ended
	var evs []splitEvent
	var e Ended
	var v splitEvent
	var state, oldState, leaseEnd string
	var worker *string
	var leaseExpired *time.Time
	_, err := pgx.ForEachRow(rows, []any{&e.ID.Partition, &e.ID.UUID, &e.FlowID, &v.ns, &e.Attempt, &e.LeaseEpoch, &state,
		&v.step, &worker, &oldState, &leaseExpired, &v.outcome, &leaseEnd}, func() error {
		e.State, e.WasRunning = ffdtype.State(state), oldState == string(ffdtype.StateRunning)
		out, evs = append(out, e), append(evs, v)
		// Fresh targets for the next row: its pointers must not alias these.
		e, v, worker, leaseExpired = Ended{}, splitEvent{}, nil, nil
		return nil
	})
	return out, evs, err
}

// splitEventsInsert is the insert of the events of ended (evs[i] is
// ended[i]'s) as rows of VALUES, returning each event's execution and id.
// An event of no flow is born dispatched, as terminateCompletionEvents
// writes it.
func splitEventsInsert(ended []Ended, evs []splitEvent) (string, []any) {
	const cols = 7
	var b strings.Builder
	b.WriteString(`INSERT INTO ff_completion_event (partition_key, execution_id, flow_id, outcome, attempt, namespace, dispatched_at, step) VALUES `)
	args := make([]any, 0, cols*len(evs))
	for i, v := range evs {
		p := func(k int) string { return "$" + strconv.Itoa(cols*i+k) }
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(" + p(1) + "::smallint, " + p(2) + "::uuid, " + p(3) + "::uuid, " + p(4) + "::text, " + p(5) + "::int, " +
			p(6) + "::text, CASE WHEN " + p(3) + "::uuid IS NULL THEN now() END, " + p(7) + "::text)")
		e := ended[i]
		args = append(args, e.ID.Partition, pgUUID(e.ID.UUID), e.FlowID, v.outcome, e.Attempt, v.ns, v.step)
	}
	b.WriteString(" RETURNING execution_id, event_id")
	return b.String(), args
}
