package cascade

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Hooks receive what the cascade did, for metrics. Every method must be
// cheap and safe for concurrent use. A nil Hooks is allowed.
type Hooks interface {
	// Dispatched is called once per committed dispatch transaction with the
	// events it dispatched and each event's age at dispatch (from its
	// insertion to the dispatch, both by the database clock).
	Dispatched(events int, delays []time.Duration)
	// Resolved is called with the edges resolved, by upstream outcome class
	// (success, failed, skipped), and the decisions taken.
	Resolved(byOutcome map[string]int, decisions map[store.Decision]int)
	// SiblingsCancelled is called with the siblings a tick cancelled.
	SiblingsCancelled(n int)
}

// Dispatcher dispatches completion events and drains sibling
// cancellations.
type Dispatcher struct {
	db    store.DB
	hooks Hooks
	// step, when set (tests), runs between the statements of a dispatch
	// transaction, to prove that a crash at any of them loses nothing.
	step func(ctx context.Context, tx pgx.Tx, name string) error
}

// New builds a dispatcher over db (a pool).
func New(db store.DB, hooks Hooks) *Dispatcher {
	return &Dispatcher{db: db, hooks: hooks}
}

// Result says what a dispatch did.
type Result struct {
	Events        int
	EdgesResolved int
	Decided       []flows.Decided
	Skipped       int
	CancelGroups  int
	// Age is the oldest dispatched event's age at dispatch: for one event,
	// the hop latency from its commit to its cascade (database clock).
	Age time.Duration
}

type event struct {
	id        int64
	part      int16
	execution *uuid.UUID
	flow      *uuid.UUID
	outcome   string
	age       time.Duration
}

const eventColumns = `c.event_id, c.partition_key, c.execution_id, c.flow_id, c.outcome,
	extract(epoch FROM clock_timestamp() - c.occurred_at) * 1e6`

// lockAndMark wraps a query selecting events to lock (their partition_key
// and event_id): it locks them and marks them dispatched in the same
// statement, one round trip for both. The mark commits with the rest of
// the dispatch or not at all, so marking first is as safe as marking last.
func lockAndMark(pick string) string {
	return `WITH picked AS (` + pick + `)
		UPDATE ff_completion_event c SET dispatched_at = clock_timestamp()
		FROM picked p
		WHERE c.partition_key = p.partition_key AND c.event_id = p.event_id
		RETURNING ` + eventColumns
}

// Dispatch dispatches one event by id. It returns a zero Result when the
// event is already dispatched, unknown, or being dispatched by someone
// else right now (whoever holds it will finish it, or roll back and leave
// it to the sweep).
func (d *Dispatcher) Dispatch(ctx context.Context, eventID int64) (Result, error) {
	return d.dispatch(ctx, lockAndMark(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE event_id = $1 AND dispatched_at IS NULL
		FOR NO KEY UPDATE SKIP LOCKED`), eventID)
}

// DispatchMany dispatches the given events (those still undispatched and
// not held by another dispatcher) in one transaction: the daemon's cascade
// workers hand it every notification that queued up while they worked, so
// that one commit carries many hops.
func (d *Dispatcher) DispatchMany(ctx context.Context, eventIDs []int64) (Result, error) {
	return d.dispatch(ctx, lockAndMark(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE event_id = ANY($1) AND dispatched_at IS NULL
		ORDER BY event_id
		FOR NO KEY UPDATE SKIP LOCKED`), eventIDs)
}

// DispatchBatch dispatches up to limit undispatched events at least grace
// old, oldest first, in one transaction. The sweep uses it; grace keeps it
// from racing the NOTIFY-driven dispatch of events that just committed.
func (d *Dispatcher) DispatchBatch(ctx context.Context, limit int, grace time.Duration) (Result, error) {
	return d.dispatch(ctx, lockAndMark(`SELECT partition_key, event_id FROM ff_completion_event
		WHERE dispatched_at IS NULL AND occurred_at <= clock_timestamp() - $2::bigint * interval '1 microsecond'
		ORDER BY event_id
		LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED`), limit, grace.Microseconds())
}

func (d *Dispatcher) dispatch(ctx context.Context, pick string, args ...any) (Result, error) {
	var res Result
	var delays []time.Duration
	var byOutcome map[string]int
	decisions := map[store.Decision]int{}
	err := store.InTx(ctx, d.db, func(tx pgx.Tx) error {
		res, delays, byOutcome = Result{}, delays[:0], nil
		clear(decisions)
		rows, err := tx.Query(ctx, pick, args...)
		if err != nil {
			return fmt.Errorf("lock events: %w", err)
		}
		events, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (event, error) {
			var e event
			var micros float64
			err := r.Scan(&e.id, &e.part, &e.execution, &e.flow, &e.outcome, &micros)
			e.age = time.Duration(micros) * time.Microsecond
			return e, err
		})
		if err != nil {
			return fmt.Errorf("lock events: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		if err := d.hook(ctx, tx, "locked"); err != nil {
			return err
		}
		// Flow events and solo executions have no edges: marking them
		// (done as they were locked) is all. Since migration 00004 they
		// are born dispatched; this covers those written before it.
		var rs []flows.Resolution
		for _, e := range events {
			delays = append(delays, e.age)
			res.Age = max(res.Age, e.age)
			if e.execution != nil && e.flow != nil {
				rs = append(rs, flows.Resolution{Upstream: ident.ExecutionID{Partition: e.part, UUID: *e.execution}, Outcome: e.outcome})
			}
		}
		if len(rs) > 0 {
			r, err := flows.Resolve(ctx, tx, rs)
			if err != nil {
				return err
			}
			res.EdgesResolved, res.Decided, res.Skipped, res.CancelGroups = r.EdgesResolved, r.Decided, len(r.Skipped), r.CancelGroups
			byOutcome = r.ByOutcome
			for _, dec := range r.Decided {
				decisions[dec.Decision]++
			}
		}
		if err := d.hook(ctx, tx, "resolved"); err != nil {
			return err
		}
		res.Events = len(events)
		return d.hook(ctx, tx, "marked")
	})
	if err != nil {
		return Result{}, fmt.Errorf("dispatch completion events: %w", err)
	}
	if d.hooks != nil && res.Events > 0 {
		d.hooks.Dispatched(res.Events, delays)
		d.hooks.Resolved(byOutcome, decisions)
	}
	return res, nil
}

func (d *Dispatcher) hook(ctx context.Context, tx pgx.Tx, name string) error {
	if d.step == nil {
		return nil
	}
	return d.step(ctx, tx, name)
}

// Sibling cancellation attribution.
const (
	SiblingCancelReason = "sibling_quorum_satisfied"
	SiblingCancelledBy  = "engine"
)

// CancelSiblings drains up to maxGroups pending cancel groups, one
// transaction each, and returns how many siblings it cancelled. A group
// held by another worker is skipped; a crash mid-group rolls that group
// back whole, and the next tick does it again. Cancelling an already
// terminal sibling is a no-op, so nothing is cancelled twice.
func (d *Dispatcher) CancelSiblings(ctx context.Context, maxGroups int) (groups, cancelled int, err error) {
	for range maxGroups {
		found, n, err := d.cancelOneGroup(ctx)
		if err != nil {
			return groups, cancelled, err
		}
		if !found {
			break
		}
		groups++
		cancelled += n
	}
	if d.hooks != nil && cancelled > 0 {
		d.hooks.SiblingsCancelled(cancelled)
	}
	return groups, cancelled, nil
}

func (d *Dispatcher) cancelOneGroup(ctx context.Context) (found bool, cancelled int, err error) {
	err = store.InTx(ctx, d.db, func(tx pgx.Tx) error {
		found, cancelled = false, 0
		var part int16
		var flow, down uuid.UUID
		err := tx.QueryRow(ctx, `SELECT partition_key, flow_id, downstream_id FROM ff_pending_cancel_group
			ORDER BY enqueued_at LIMIT 1 FOR UPDATE SKIP LOCKED`).Scan(&part, &flow, &down)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("take pending cancel group: %w", err)
		}
		found = true
		var members []uuid.UUID
		// Lock the group before the siblings (the global order: groups,
		// executions, flows): a dispatch resolving into this group holds it
		// while it skips downstreams and finishes flows.
		if err := tx.QueryRow(ctx, `SELECT cancel_members FROM ff_edge_group
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3
			FOR NO KEY UPDATE`, part, flow, down).Scan(&members); err != nil {
			return fmt.Errorf("read siblings of %s: %w", down, err)
		}
		ends := make([]store.Ending, len(members))
		for i, m := range members {
			ends[i] = store.Ending{ID: ident.ExecutionID{Partition: part, UUID: m}, State: store.StateCancelled,
				Reason: SiblingCancelReason, By: SiblingCancelledBy}
		}
		ended, err := store.Terminate(ctx, tx, ends)
		if err != nil {
			return err
		}
		cancelled = len(ended)
		if err := d.hook(ctx, tx, "siblings cancelled"); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_edge_group SET cancel_members = '{}'
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`, part, flow, down); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `DELETE FROM ff_pending_cancel_group
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`, part, flow, down)
		return err
	})
	if err != nil {
		return false, 0, fmt.Errorf("cancel siblings: %w", err)
	}
	return found, cancelled, nil
}
