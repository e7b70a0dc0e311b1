package cascade

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
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
	Resolved(byOutcome map[string]int, decisions map[ffdtype.Decision]int)
	// SiblingsCancelled is called with the siblings a tick cancelled.
	SiblingsCancelled(n int)
}

// Dispatcher dispatches completion events and drains sibling
// cancellations.
type Dispatcher struct {
	db    store.DB
	hooks Hooks
	// lockTimeout bounds each lock wait of a dispatch transaction (0: the
	// session's lock_timeout); see SetLockTimeout.
	lockTimeout time.Duration
	// step, when set (tests), runs between the statements of a dispatch
	// transaction, to prove that a crash at any of them loses nothing.
	step func(ctx context.Context, tx pgx.Tx, name string) error
}

// New builds a dispatcher over db (a pool).
func New(db store.DB, hooks Hooks) *Dispatcher {
	return &Dispatcher{db: db, hooks: hooks}
}

// SetLockTimeout bounds how long a dispatch transaction waits for any one
// lock (0: the session's lock_timeout). A transaction that waits longer
// (another process holds one of its flows: a frozen daemon, a long
// cancel) is rolled back and its events are dispatched one by one, so
// the flows nobody holds go on and only the held flow's events wait, for
// the sweep. Call it before the dispatcher is used.
func (d *Dispatcher) SetLockTimeout(t time.Duration) { d.lockTimeout = t }

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

// Dispatch dispatches one event by id. It returns a zero Result when the
// event is already dispatched, unknown, or being dispatched by someone
// else right now (whoever holds it will finish it, or roll back and leave
// it to the sweep).
func (d *Dispatcher) Dispatch(ctx context.Context, eventID int64) (Result, error) {
	return d.DispatchMany(ctx, []int64{eventID})
}

// DispatchMany dispatches the given events (those still undispatched and
// not held by another dispatcher) in one transaction: the daemon's cascade
// workers hand it every notification that queued up while they worked, so
// that one commit carries many hops.
func (d *Dispatcher) DispatchMany(ctx context.Context, eventIDs []int64) (Result, error) {
	return d.dispatch(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) {
		return store.TakeEvents(ctx, tx, eventIDs, d.lockTimeout)
	})
}

// DispatchPartitions dispatches up to limit undispatched events of the
// given partitions (those not held by another dispatcher), oldest first,
// in one transaction: the daemon's cascade workers hand it the partitions
// that notifications named while they worked. When the take fills its
// batch, more may wait: full (nil: none) is called at once, before the
// events are resolved, so that another worker can take the next batch
// while this one works.
func (d *Dispatcher) DispatchPartitions(ctx context.Context, parts []int16, limit int, full func()) (Result, error) {
	dist, err := store.Distributed(ctx, d.db)
	if err != nil {
		return Result{}, err
	}
	// filled calls full when a take of up to limit filled its batch.
	filled := func(limit int, events []store.Dispatching, err error) ([]store.Dispatching, error) {
		if err == nil && len(events) >= limit && full != nil {
			full()
		}
		return events, err
	}
	if !dist {
		return d.dispatch(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) {
			events, err := store.TakePartitionEvents(ctx, tx, parts, limit, d.lockTimeout)
			return filled(limit, events, err)
		})
	}
	return d.eachShard(ctx, parts, limit, func(tx pgx.Tx, shard []int16, limit int) ([]store.Dispatching, error) {
		events, err := store.TakeShardEvents(ctx, tx, shard, limit, d.lockTimeout)
		return filled(limit, events, err)
	})
}

// eachShard dispatches the partitions of parts a transaction per shard,
// as a distributed Postgres needs (it routes a locking statement only
// when it names partitions of one shard, and commits a transaction that
// writes one shard on its node alone), taking with take at most what is
// left of limit, and stops once limit events are taken.
func (d *Dispatcher) eachShard(ctx context.Context, parts []int16, limit int,
	take func(tx pgx.Tx, shard []int16, limit int) ([]store.Dispatching, error)) (Result, error) {
	shards, err := store.ShardsOf(ctx, d.db, parts)
	if err != nil {
		return Result{}, fmt.Errorf("dispatch completion events: %w", err)
	}
	var total Result
	for _, shard := range shards {
		left := limit - total.Events
		res, err := d.dispatch(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) { return take(tx, shard, left) })
		total.add(res)
		if err != nil || total.Events >= limit {
			return total, err
		}
	}
	return total, nil
}

// add counts o's work into r.
func (r *Result) add(o Result) {
	r.Events += o.Events
	r.EdgesResolved += o.EdgesResolved
	r.Decided = append(r.Decided, o.Decided...)
	r.Skipped += o.Skipped
	r.CancelGroups += o.CancelGroups
	r.Age = max(r.Age, o.Age)
}

// DispatchBatch dispatches up to limit undispatched events at least grace
// old, oldest first, in one transaction. The sweep uses it; grace keeps it
// from racing the NOTIFY-driven dispatch of events that just committed.
func (d *Dispatcher) DispatchBatch(ctx context.Context, limit int, grace time.Duration) (Result, error) {
	dist, err := store.Distributed(ctx, d.db)
	if err != nil {
		return Result{}, err
	}
	if !dist {
		return d.dispatch(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) {
			return store.TakeOldEvents(ctx, tx, limit, grace, d.lockTimeout)
		})
	}
	// A distributed Postgres: find where the oldest wait, then a
	// transaction per shard.
	parts, err := store.OldEventPartitions(ctx, d.db, limit, grace)
	if err != nil {
		return Result{}, err
	}
	return d.eachShard(ctx, parts, limit, func(tx pgx.Tx, shard []int16, limit int) ([]store.Dispatching, error) {
		return store.TakeShardEventsOlder(ctx, tx, shard, limit, grace, d.lockTimeout)
	})
}

// dispatch takes events (locked and marked dispatched) and resolves the
// edges of every flow member among them, in one transaction. Flow events
// and solo executions have no edges: taking them is all. Since migration
// 00004 they are born dispatched; this covers those written before it.
func (d *Dispatcher) dispatch(ctx context.Context, take func(pgx.Tx) ([]store.Dispatching, error)) (Result, error) {
	var taken []store.Dispatching
	res, err := d.dispatchOnce(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) {
		events, err := take(tx)
		taken = events
		return events, err
	})
	switch {
	case err == nil || !store.IsLockTimeout(err) || len(taken) == 0:
		return res, err
	case len(taken) == 1:
		return Result{}, &HeldError{Events: 1, Flows: 1}
	}
	return d.oneByOne(ctx, taken)
}

// oneByOne dispatches, each in a transaction of its own, the events of a
// batch that waited too long for a lock. An event whose flow another
// event of the batch found held is left for the sweep at once (its flow
// is still held); so is one that waits too long itself.
func (d *Dispatcher) oneByOne(ctx context.Context, events []store.Dispatching) (Result, error) {
	var total Result
	held := map[uuid.UUID]bool{}
	left := 0
	for _, e := range events {
		if e.FlowID != nil && held[*e.FlowID] {
			left++
			continue
		}
		// By partition and id: one shard's statement on Citus too.
		r, err := d.dispatch(ctx, func(tx pgx.Tx) ([]store.Dispatching, error) {
			return store.TakeEvent(ctx, tx, e.Partition, e.EventID, d.lockTimeout)
		})
		var h *HeldError
		if errors.As(err, &h) {
			if e.FlowID != nil {
				held[*e.FlowID] = true
			}
			left++
			continue
		}
		if err != nil {
			return total, err
		}
		total.add(r)
	}
	if left > 0 {
		return total, &HeldError{Events: left, Flows: len(held)}
	}
	return total, nil
}

// HeldError reports work left for later because another transaction held
// its rows longer than the dispatcher's lock timeout: completion events
// left undispatched (Events, of Flows flows), or sibling-cancel groups
// moved to the back of their queue (Events 0, Flows groups). The rest of
// the batch was done.
type HeldError struct {
	Events, Flows int
}

func (e *HeldError) Error() string {
	if e.Events == 0 {
		return fmt.Sprintf("%d sibling-cancel groups left for later: another transaction holds their siblings", e.Flows)
	}
	return fmt.Sprintf("%d completion events of %d flows left for the sweep: another transaction holds their flows", e.Events, e.Flows)
}

// dispatchOnce is one dispatch transaction.
func (d *Dispatcher) dispatchOnce(ctx context.Context, take func(pgx.Tx) ([]store.Dispatching, error)) (Result, error) {
	var res Result
	var delays []time.Duration
	var byOutcome map[string]int
	decisions := map[ffdtype.Decision]int{}
	err := store.InTx(ctx, d.db, func(tx pgx.Tx) error {
		res, delays, byOutcome = Result{}, delays[:0], nil
		clear(decisions)
		events, err := take(tx)
		if err != nil {
			return fmt.Errorf("lock events: %w", err)
		}
		if len(events) == 0 {
			return nil
		}
		if err := d.hook(ctx, tx, "locked"); err != nil {
			return err
		}
		var rs []store.Resolution
		for _, e := range events {
			delays = append(delays, e.Age)
			res.Age = max(res.Age, e.Age)
			if e.ExecutionID != nil && e.FlowID != nil {
				rs = append(rs, store.Resolution{Upstream: ffdtype.ExecutionID{Partition: e.Partition, UUID: *e.ExecutionID}, Outcome: e.Outcome})
			}
		}
		if len(rs) > 0 {
			// Relaxed: a dispatch writes nothing that must outlive a
			// crash by itself; lost before its flush, its events are
			// undispatched again and dispatched anew.
			r, err := flows.Resolve(ctx, tx, rs, true)
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
//
// A group whose siblings another transaction holds past the dispatcher's
// lock timeout (SetLockTimeout) goes to the back of the queue and the
// next group is taken, so that a held flow delays only its own groups;
// such groups are reported, after the others, as a *HeldError.
func (d *Dispatcher) CancelSiblings(ctx context.Context, maxGroups int) (groups, cancelled int, err error) {
	held := map[ffdtype.ExecutionID]bool{}
	for range maxGroups {
		found, n, down, err := d.cancelOneGroup(ctx)
		if errors.As(err, new(*HeldError)) {
			if held[down] {
				break // every group left is held: the next tick tries again
			}
			held[down] = true
			continue
		}
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
	if len(held) > 0 {
		return groups, cancelled, &HeldError{Flows: len(held)}
	}
	return groups, cancelled, nil
}

func (d *Dispatcher) cancelOneGroup(ctx context.Context) (found bool, cancelled int, down ffdtype.ExecutionID, err error) {
	var flowID uuid.UUID
	err = store.InTx(ctx, d.db, func(tx pgx.Tx) error {
		found, cancelled = false, 0
		var err error
		flowID, down, err = store.TakeCancelGroup(ctx, tx, d.lockTimeout)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("take pending cancel group: %w", err)
		}
		found = true
		// Lock the group before the siblings (the global order): a
		// dispatch resolving into this group holds it while it skips
		// downstreams and finishes flows.
		g, _, err := store.NewLocks(tx).Group(ctx, flowID, down, nil)
		if err != nil {
			return fmt.Errorf("read siblings of %s: %w", down, err)
		}
		ends := make([]store.Termination, len(g.CancelMembers))
		for i, m := range g.CancelMembers {
			ends[i] = store.Termination{ID: m, State: ffdtype.StateCancelled, Reason: SiblingCancelReason, By: SiblingCancelledBy}
		}
		ended, err := store.Terminate(ctx, tx, ends)
		if err != nil {
			return err
		}
		cancelled = len(ended)
		if err := d.hook(ctx, tx, "siblings cancelled"); err != nil {
			return err
		}
		return store.DoneCancelGroup(ctx, tx, flowID, down)
	})
	if found && store.IsLockTimeout(err) {
		if rerr := store.RequeueCancelGroup(ctx, d.db, flowID, down); rerr != nil {
			return false, 0, down, fmt.Errorf("cancel siblings: %w", rerr)
		}
		return true, 0, down, &HeldError{Flows: 1}
	}
	if err != nil {
		return false, 0, down, fmt.Errorf("cancel siblings: %w", err)
	}
	return found, cancelled, down, nil
}
