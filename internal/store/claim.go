package store

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5"
)

// claimSQL takes the due pending executions of a lane, highest priority
// then oldest run_at, that the worker's capabilities cover, skipping rows
// another claimer holds. The capability test is in the WHERE clause, so an
// execution nobody can run never blocks the lane behind it. One statement
// starts the attempt, bumps the epoch, sets started_at on the first claim
// only, and records the attempt on the row (attempt_worker,
// attempt_started_at): a claim writes one row, the execution's. No attempt
// row and no `acquired` lease event (migration 00018): the attempt is read
// from the row until it ends with a retry, and the daemon's lease timers
// come from the lease-expiry index.
//
// The capability test says `= '{}' OR <@` although `<@` alone means the
// same: the planner guesses `<@` keeps 0.5% of rows, and once ANALYZE has
// seen a table of finished executions it trusts the guess, sorts every
// pending row of the lane and only then applies the LIMIT (20 ms per claim
// at 20,000 pending instead of 0.3 ms). The equality it can estimate from
// the column's statistics (most executions require nothing), so it keeps
// reading the claim index in order and stops at the LIMIT.
//
// Lane control (ff_lane holds rows only for paused, capped, rate-limited
// or keyed lanes): the claim takes nothing from a lane with a row unless
// $5 says the caller holds that row's lock and computed the room ($3)
// itself (claimCapped, on a distributed Postgres); elsewhere such a lane
// is claimed from by claimControlled (key.go). Keyed executions are never
// this statement's: the claim index holds only unkeyed rows, and the
// statement says concurrency_key IS NULL to match it.
// The test is an uncorrelated NOT EXISTS, which the planner runs once as a
// one-time filter, so a lane nobody controls claims with the same plan,
// reading the claim index in order and stopping at the LIMIT, as before
// lane control existed.
//
// The claim runs on its generic plan (claimGeneric): planning it was
// 0.3-0.5 ms a call, as long as a claim of 50 executes, because with
// `LIMIT $3` Postgres prices a generic plan as if it took a tenth of the
// lane and so re-plans every call. The update finds the picked rows by
// their ctid (a TID scan whatever the estimate), which keeps the generic
// plan as good as a custom one; a locked row's ctid cannot change before
// this statement ends. (A pending row that another transaction updated
// after this statement's snapshot and that is still claimable would be
// locked but, its new version being invisible to the snapshot, not
// updated: it stays pending for the next claim. Of ffd's writers only
// adding an execution to a flow, and a rerun's setup, update a pending
// row and leave it pending; such a row waits one claim.)
//
// Cross-partition: a lane's pending rows live on every partition, and the
// claim takes the best of them wherever they are. A distributed Postgres
// locks rows only in statements that name one partition, so there the
// claim is routed (claimRouted).
var claimSQL = claimStatement(narrowTo(false, ""), "now()", afterNow)

// afterNow is the time the interval column d from now, as one Postgres
// writes it.
func afterNow(d string) string { return "now() + " + d }

// claimStatement is the claim, narrowed by narrow (a condition on an
// alias's partition_key, or nothing), with now the expression of the
// current time and after(d) that of the time the interval column d from
// now: on a distributed Postgres timePlus, since it refuses a STABLE
// function or operator next to a column in an UPDATE (leaseStart).
//
// It is one UPDATE whose subquery picks and locks the rows (an InitPlan
// run once), not a CTE of them: a distributed Postgres runs a modifying
// CTE as a subplan whose rows pass through an intermediate result, even
// in a statement that names one shard (on one worker node the claim's
// database time per execution fell by a quarter without it,
// docs/scaling.md). The rows come back in no order; callers sort them
// (sortClaimed).
func claimStatement(narrow func(alias string) string, now string, after func(d string) string) string {
	return `
UPDATE ff_execution e SET ` + leaseStart("$4", now, after) + `
WHERE e.ctid = ANY(ARRAY(
	SELECT p.ctid
	FROM ff_execution p
	WHERE p.state = 'pending' AND p.lane = $1 AND p.run_at <= ` + now + narrow("p") + `
		AND p.concurrency_key IS NULL
		AND (p.required_capabilities = '{}' OR p.required_capabilities <@ $2::text[])
		AND (p.deadline_at IS NULL OR p.deadline_at > ` + now + `)
		AND ($5::boolean OR NOT EXISTS (SELECT 1 FROM ff_lane l WHERE l.lane = $1))
	ORDER BY p.priority DESC, p.run_at, p.execution_id
	LIMIT $3
	FOR NO KEY UPDATE OF p SKIP LOCKED))` + narrow("e") + `
RETURNING ` + execColumns
}

// leaseStart is the SET list of every claim, plain or keyed, on one
// Postgres or routed: the execution starts an attempt under a new lease
// held by worker (a parameter), at now (an expression), with after(d)
// the expression of now plus the interval column d. The first attempt's
// start is least(started_at, now), which ignores a NULL: a distributed
// Postgres refuses a COALESCE around any but an immutable function.
func leaseStart(worker, now string, after func(d string) string) string {
	return `
		state = 'running',
		attempt = e.attempt + 1,
		lease_epoch = e.lease_epoch + 1,
		lease_owner = ` + worker + `,
		lease_expires_at = ` + after("e.lease_ttl") + `,
		attempt_deadline_at = ` + after("e.attempt_timeout") + `,
		started_at = least(e.started_at, ` + now + `),
		attempt_worker = ` + worker + `,
		attempt_started_at = ` + now
}

// claimPickSQL finds, without locking, where the best due executions of a
// lane are: a partition per execution, best first, at most $3.
const claimPickSQL = `
SELECT e.partition_key
FROM ff_execution e
WHERE e.state = 'pending' AND e.lane = $1 AND e.run_at <= now()
	AND e.concurrency_key IS NULL
	AND (e.required_capabilities = '{}' OR e.required_capabilities <@ $2::text[])
	AND (e.deadline_at IS NULL OR e.deadline_at > now())
	AND ($4::boolean OR NOT EXISTS (SELECT 1 FROM ff_lane l WHERE l.lane = $1))
ORDER BY e.priority DESC, e.run_at, e.execution_id
LIMIT $3`

// claimRoutedSQL claims from the partitions of one shard ($6).
var claimRoutedSQL = claimStatement(narrowTo(true, "ANY($6::smallint[])"), "now()",
	func(d string) string { return nowPlus(intervalSeconds(d)) })

// Claim leases up to max due executions of lane that caps cover, for
// worker, in one statement.
func Claim(ctx context.Context, db DB, lane string, caps []string, max int, worker string) ([]*ffdtype.Execution, error) {
	out, _, err := ClaimThrottled(ctx, db, lane, caps, max, worker)
	return out, err
}

// ClaimThrottled is Claim that also says, when a lane under control gave
// less than max, whether due executions wait behind its limits and when
// its next rate token comes.
func ClaimThrottled(ctx context.Context, db DB, lane string, caps []string, max int, worker string) ([]*ffdtype.Execution, Throttle, error) {
	var out []*ffdtype.Execution
	var th Throttle
	if key, ok := controlKey(db, lane); ok && controlledRecently(key) {
		// The lane was under control a moment ago: the controlled claim
		// first, in one round trip, without the plain claim and the
		// probe that would find it so again.
		out, th, again, err := claimStillControlled(ctx, db, key, lane, caps, max, worker)
		if err != nil {
			return nil, th, wrap("claim from lane "+lane, err)
		}
		if !again {
			return out, th, nil
		}
	}
	err := WithRetry(ctx, db, func() error {
		var err error
		out, err = claimGeneric(ctx, db, !inCallerTx(db), lane, caps, max, worker, false)
		return err
	})
	if err == nil && len(out) == 0 {
		// Nothing: an idle lane, or one under control, which only the
		// controlled claim takes from. One probe tells them apart.
		out, th, _, err = claimUnderControl(ctx, db, lane, caps, max, worker)
	}
	if err != nil {
		return nil, th, wrap("claim from lane "+lane, err)
	}
	return out, th, nil
}

// claimUnderControl claims from lane when it has a control row that lets
// it be claimed from (not paused), and reads the throttle when the claim
// took less than max. It says whether the lane is under control (a
// paused one is), and remembers one it claims from (markControlled).
func claimUnderControl(ctx context.Context, db DB, lane string, caps []string, max int, worker string) (out []*ffdtype.Execution, th Throttle, under bool, err error) {
	c, ok, err := readLaneControl(ctx, db, lane)
	if err != nil || !ok || !(c.paused || c.capped || c.rated || c.keyed) {
		return nil, th, false, err
	}
	if c.paused {
		return nil, th, true, nil
	}
	if key, ok := controlKey(db, lane); ok {
		markControlled(key)
	}
	dist, err := Distributed(ctx, db)
	if err != nil {
		return nil, th, true, err
	}
	switch {
	case dist && !c.rated && !c.keyed:
		out, err = claimCapped(ctx, db, lane, caps, max, worker)
	case !dist:
		err = WithRetry(ctx, db, func() error {
			var err error
			out, err = claimControlled(ctx, db, lane, caps, max, worker)
			return err
		})
	default:
		err = WithRetry(ctx, db, func() error {
			var err error
			out, err = claimControlledRouted(ctx, db, lane, c, caps, max, worker)
			return err
		})
	}
	if err != nil || len(out) >= max {
		return out, th, true, err
	}
	th, err = ClaimThrottle(ctx, db, lane, caps)
	return out, th, true, err
}

// claimCapped claims from a capped lane with its room locked, so claims
// in the lane count their room one after the other: the count runs after
// the lock is granted, on a snapshot that sees every claim committed
// before.
func claimCapped(ctx context.Context, db DB, lane string, caps []string, max int, worker string) ([]*ffdtype.Execution, error) {
	var out []*ffdtype.Execution
	err := InTx(ctx, db, func(tx pgx.Tx) error {
		var paused bool
		var limit *int
		b := &pgx.Batch{}
		b.Queue(laneLockSQL, lane)
		b.Queue(`SELECT paused, max_running FROM ff_lane WHERE lane = $1`, lane).QueryRow(func(row pgx.Row) error {
			return row.Scan(&paused, &limit)
		})
		err := tx.SendBatch(ctx, b).Close()
		if errors.Is(err, pgx.ErrNoRows) || paused || limit == nil {
			return nil // resumed, uncapped or paused since the probe
		}
		if err != nil {
			return err
		}
		var running int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM ff_execution WHERE state = 'running' AND lane = $1`, lane).Scan(&running); err != nil {
			return err
		}
		room := min(max, *limit-running)
		if room <= 0 {
			return nil
		}
		out, err = claimGeneric(ctx, tx, !inCallerTx(db), lane, caps, room, worker, true)
		return err
	})
	return out, err
}

// claimRouted claims on a distributed Postgres. In its own transaction,
// or with a capped lane's room locked (in the transaction that holds
// it), it claims shard by shard (claimShards); in a caller's transaction
// it reads where the best candidates are (a read locks nothing, so it may
// span every shard), then claims from the shards they are in, as many as
// it found there, in one pipelined batch of statements that each name
// the partitions of one shard (byShard): a transaction that writes every
// shard it names.
func claimRouted(ctx context.Context, db DB, lane string, caps []string, max int, worker string, locked bool) ([]*ffdtype.Execution, error) {
	if locked || !inCallerTx(db) {
		return claimShards(ctx, db, lane, caps, max, worker, locked)
	}
	cands, err := pickPartitions(ctx, db, lane, caps, max, locked)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	shards, err := byShard(ctx, db, cands, func(p int16) int16 { return p })
	if err != nil {
		return nil, err
	}
	var out []*ffdtype.Execution
	b := &pgx.Batch{}
	for _, g := range shards {
		b.Queue(claimRoutedSQL, lane, caps, len(g.items), worker, locked, g.parts).Query(func(rows pgx.Rows) error {
			xs, err := collectExecutions(rows)
			out = append(out, xs...)
			return err
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	sortClaimed(out)
	return out, nil
}

// pickPartitions reads, without locking, the partition of each of the
// best due executions of a lane (at most limit, best first; a partition
// once per execution).
func pickPartitions(ctx context.Context, db DB, lane string, caps []string, limit int, locked bool) ([]int16, error) {
	rows, err := db.Query(ctx, claimPickSQL, lane, caps, limit, locked)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int16])
}

// sortClaimed puts claimed executions (the claim returns them in no order,
// from one shard or several) in the claim's order: priority, then run_at,
// then id.
func sortClaimed(out []*ffdtype.Execution) {
	slices.SortStableFunc(out, func(a, b *ffdtype.Execution) int {
		if a.Priority != b.Priority {
			return cmp.Compare(b.Priority, a.Priority)
		}
		if c := a.RunAt.Compare(b.RunAt); c != 0 {
			return c
		}
		return bytes.Compare(a.ID.UUID[:], b.ID.UUID[:])
	})
}

// hotPlansSQL sets how the rest of its transaction plans, in the
// transactions of ffd's hot path on one Postgres: a worker's claim
// (plain, claimGeneric, or controlled, claimControlled), a worker's
// completions (TerminateWithin, endings all by their holders), and the
// daemon's dispatch, whose take
// sets the same in its own statement (takeEvents). Three settings:
//
//   - Generic plans. Planned afresh at each call, these statements took
//     as long to plan as to run (a claim of 50 0.3-0.5 ms; each
//     statement of a dispatch 0.1-0.6 ms).
//   - No sequential scans. Each statement reads rows by key (an
//     execution, a flow's live members, a group, a lane's key) or a
//     lane's due rows in claim order, which an index serves whatever the
//     table's size. A generic plan is made once per connection and kept
//     until the table's statistics change; made while a table was small
//     (a new install, a table emptied by retention, or one whose rows
//     churn faster than it is analyzed), it read the whole table at
//     every call, by a sequential scan or a hash join over one: a keyed
//     claim's turn read every key of every lane and each dead version of
//     them (1 ms of a hot key's 1.5 ms turn; auto_explain), a chain's
//     completions and dispatches the executions, groups and flows
//     (docs/benchmarks.md).
//   - No bitmap scans. A bitmap scan returns rows in no order, so a
//     claim would sort every due row of its lane (claimGeneric).
//
// A statement that has no other way still gets its scan: the settings
// price it, they do not forbid it.
var hotPlansSQL = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)` + offScans(func(string) string { return "'off'" })

// hotPlanScans are the scans hotPlansSQL turns off.
var hotPlanScans = []string{"enable_seqscan", "enable_bitmapscan"}

// offScans is, for each of hotPlanScans, a set_config of it to value(it)
// for the rest of the transaction, each after a comma.
func offScans(value func(setting string) string) string {
	var b strings.Builder
	for _, s := range hotPlanScans {
		b.WriteString(", set_config('" + s + "', " + value(s) + ", true)")
	}
	return b.String()
}

// claimGeneric runs the claim statement on its generic plan, set for the
// claim's own transaction (one pipelined batch: the setting and the
// claim, one round trip), when own says the transaction is the claim's.
// In a caller's transaction the setting would outlive the claim, so there
// the claim is planned as Postgres chooses.
//
// hotPlansSQL turns bitmap scans off for the claim's transaction too.
// The claim reads the lane in claim order and stops at its LIMIT; a
// bitmap scan cannot return rows in order, so the plan would sort every
// due row of the lane for each claim. The planner chose that when
// ff_execution's statistics said it held no row (analyzed after its
// rows were deleted, before a vacuum: a queue drained by retention, or
// the bench's cleanup), and claims took 47 ms at 40,000 pending, the
// run 3,800 executions/s against 15,000 (docs/benchmarks.md).
func claimGeneric(ctx context.Context, db DB, own bool, lane string, caps []string, max int, worker string, locked bool) ([]*ffdtype.Execution, error) {
	if dist, err := Distributed(ctx, db); err != nil || dist {
		if err != nil {
			return nil, err
		}
		return claimRouted(ctx, db, lane, caps, max, worker, locked)
	}
	if !own {
		out, err := queryExecutions(db.Query(ctx, claimSQL, lane, caps, max, worker, locked))
		sortClaimed(out)
		return out, unroutable(db, err)
	}
	var out []*ffdtype.Execution
	b := &pgx.Batch{}
	b.Queue(hotPlansSQL)
	b.Queue(claimSQL, lane, caps, max, worker, locked).Query(func(rows pgx.Rows) error {
		var err error
		out, err = queryExecutions(rows, nil)
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, unroutable(db, err)
	}
	sortClaimed(out)
	return out, nil
}
