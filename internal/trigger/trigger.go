package trigger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc/pool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/schedule"
	"github.com/flowfabric/ffd/internal/store"
)

// Params is a trigger to create: each event Event of Namespace whose
// payload contains Filter creates Execution, or submits Flow (exactly
// one of them).
type Params struct {
	Name      string
	Namespace string // default leases.DefaultNamespace
	Event     string
	Filter    map[string]any
	Paused    bool
	Execution *ffdtype.CreateParams
	Flow      *ffdtype.SubmitFlowParams
}

// Create checks a trigger, everything an event will start included, and
// stores it. A name in use is a conflict carrying the existing trigger.
func Create(ctx context.Context, db store.DB, lim leases.Limits, p Params) (*store.TriggerRow, error) {
	if err := leases.ValidateName("name", p.Name); err != nil {
		return nil, err
	}
	if err := leases.NormalizeNamespace(&p.Namespace); err != nil {
		return nil, err
	}
	if err := leases.ValidateName("event", p.Event); err != nil {
		return nil, err
	}
	if p.Filter != nil {
		if _, err := json.Marshal(p.Filter); err != nil {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "filter", fmt.Sprint(p.Filter), "a JSON object: "+err.Error())
		}
	}
	row := store.TriggerRow{Trigger: ffdtype.Trigger{Name: p.Name, Namespace: p.Namespace, Event: p.Event, Filter: p.Filter, Paused: p.Paused}}
	var err error
	if row.Target, row.Params, err = schedule.EncodeTarget(lim, p.Namespace, p.Execution, p.Flow, "a trigger", "event"); err != nil {
		return nil, err
	}
	t, err := store.InsertTrigger(ctx, db, row)
	if store.IsTriggerTaken(err) {
		existing, _ := store.GetTrigger(ctx, db, p.Name)
		return nil, &ffdtype.ConflictError{Object: "trigger", ID: p.Name, Reason: "a trigger with this name exists; delete it first", Existing: existing}
	}
	if err != nil {
		return nil, fmt.Errorf("create trigger %s: %w", p.Name, err)
	}
	return t, nil
}

// Delete deletes a trigger; events published after it start nothing of
// it. A trigger that does not exist is a *NotFoundError.
func Delete(ctx context.Context, db store.DB, name string) error {
	ok, err := store.DeleteTrigger(ctx, db, name)
	if err == nil && !ok {
		return &ffdtype.NotFoundError{Object: "trigger", ID: name}
	}
	return err
}

// MaxEventKey bounds an event's key.
const MaxEventKey = 512

// Publication is an event to publish. An empty Key makes the event its own
// (a fresh id); a Key published before in the namespace, under Name, is
// that event.
type Publication struct {
	Namespace, Name, Key string
	Payload              []byte // JSON, or empty
}

// Publish stores an event, or returns the event published under its key
// before (existed).
func Publish(ctx context.Context, db store.DB, lim leases.Limits, e Publication) (*ffdtype.Event, bool, error) {
	if err := leases.NormalizeNamespace(&e.Namespace); err != nil {
		return nil, false, err
	}
	if err := leases.ValidateName("event", e.Name); err != nil {
		return nil, false, err
	}
	if e.Key == "" {
		e.Key = uuid.NewString()
	}
	if err := leases.ValidateText("key", e.Key, MaxEventKey); err != nil {
		return nil, false, err
	}
	if len(e.Payload) > 0 && !json.Valid(e.Payload) {
		return nil, false, fault.Invalid(ffdtype.KindInvalidValue, "payload", fmt.Sprintf("%d bytes", len(e.Payload)), "an event's payload is JSON")
	}
	if err := lim.CheckPayload(len(e.Payload)); err != nil {
		return nil, false, err
	}
	return store.PublishEvent(ctx, db, e.Namespace, e.Name, e.Key, e.Payload)
}

// flowIDSpace derives the flow id of a firing: the same (trigger, event)
// always names the same flow.
var flowIDSpace = uuid.MustParse("2d7c9a4e-51b6-4f0e-8e3a-6a1f0c9b7d25")

// FlowID is the id of the flow trigger starts for event: derived from
// both, and placed on the event id's partition, which is the event's own
// (PublishEvent and ff_publish_event mint it there), so that an event and
// what it starts share a partition and on Citus a shard: the daemon fires
// a partition's events in one transaction on one node.
func FlowID(trigger string, event uuid.UUID) uuid.UUID {
	return ident.InPartition(uuid.NewSHA1(flowIDSpace, []byte(trigger+"@"+event.String())), ident.Partition(event))
}

// Key is the idempotency key of the execution trigger starts in namespace
// for event. A key places its execution (ident.KeyPartition), so the key
// ends in the first of the suffixes 000 to fff that places it on the
// event id's partition, as FlowID places a flow. The CRC is linear: a
// suffix moves a key's partition by the low byte of the suffix's own CRC,
// whatever comes before it, from where three zero bytes would put it; so
// the suffix is looked up, and the 4,096 reach all 256 partitions
// (TestKeySuffixes).
func Key(namespace, trigger string, event uuid.UUID) string {
	base := "ffd-trigger:" + trigger + ":" + event.String() + ":"
	from := ident.KeyPartition(namespace, base+"\x00\x00\x00")
	return fmt.Sprintf("%s%03x", base, suffixFor[byte(from)^byte(ident.Partition(event))])
}

// keySuffixes is how many suffixes Key chooses from: every three hex
// digits.
const keySuffixes = 1 << 12

// suffixFor[m] is the first suffix whose CRC's low byte is m: the one
// that moves a key's partition by m.
var suffixFor = func() (t [256]uint16) {
	var found [256]bool
	for i := range keySuffixes {
		if m := byte(ident.CRC16(fmt.Appendf(nil, "%03x", i))); !found[m] {
			t[m], found[m] = uint16(i), true
		}
	}
	return t
}()

// Result is what one Fire pass did.
type Result struct {
	Events  int // events fired
	Started int // executions and flows they started
}

// Fire fires up to limit unfired events: it starts what their triggers
// ask for and marks each fired, in transactions of the store's event
// scopes (store.UnfiredEventScopes: a batch of events of every partition
// on one Postgres, of one shard's partitions on a distributed one), up to
// workers of them at once when there are several scopes and db is a pool.
// A trigger whose target cannot start for an event (its template no
// longer valid, say) is logged and its failure kept on the event; the
// event's other triggers fire. A failure of the database that passes
// (outbox.Transient) rolls back the transaction it struck, whose events
// the next pass fires, and stops the pass; Result counts what committed.
func Fire(ctx context.Context, db store.DB, lim leases.Limits, limit, workers int, log *zap.Logger) (Result, error) {
	scopes, err := store.UnfiredEventScopes(ctx, db, limit)
	if err != nil || len(scopes) == 0 {
		return Result{}, err
	}
	if _, tx := db.(pgx.Tx); tx || workers < 1 {
		workers = 1 // a transaction runs one statement at a time
	}
	f := newFiring(db, lim, limit, log)
	p := pool.New().WithContext(ctx).WithCancelOnError().WithFirstError().WithMaxGoroutines(min(workers, len(scopes)))
	for _, s := range scopes {
		p.Go(func(ctx context.Context) error { return f.scope(ctx, s) })
	}
	err = p.Wait()
	return f.res, err
}

// firing is one pass of Fire: what is left of its limit, the
// transactions under way, and what those committed did.
type firing struct {
	db       store.DB
	lim      leases.Limits
	log      *zap.Logger
	mu       sync.Mutex
	changed  *sync.Cond // on mu: a transaction under way ended
	left     int
	underway int
	res      Result
}

func newFiring(db store.DB, lim leases.Limits, limit int, log *zap.Logger) *firing {
	f := &firing{db: db, lim: lim, left: limit, log: log}
	f.changed = sync.NewCond(&f.mu)
	return f
}

// scope fires the events of s, a transaction at a time, while the pass
// has room and s has events.
func (f *firing) scope(ctx context.Context, s store.EventScope) error {
	for tried := 0; tried < s.Unfired; {
		n := f.take(min(s.Batch, s.Unfired-tried))
		if n == 0 {
			return nil
		}
		r, err := fireScope(ctx, f.db, f.lim, s, n, f.log)
		f.done(n, r)
		if err != nil || r.Events < n {
			return err // failed, or the scope has no more
		}
		tried += n
	}
	return nil
}

// take reserves up to n of the events left to the pass. With none left
// it waits while transactions are under way: one that fires fewer than
// it reserved gives the rest back, to this scope as to any.
func (f *firing) take(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.left == 0 && f.underway > 0 {
		f.changed.Wait()
	}
	n = min(n, f.left)
	f.left -= n
	if n > 0 {
		f.underway++
	}
	return n
}

// done records what a transaction that reserved n did.
func (f *firing) done(n int, r Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.left += n - r.Events
	f.underway--
	f.res.Events += r.Events
	f.res.Started += r.Started
	f.changed.Broadcast()
}

// fireScope fires up to limit events of scope s in one transaction, and
// counts what each trigger started.
func fireScope(ctx context.Context, db store.DB, lim leases.Limits, s store.EventScope, limit int, log *zap.Logger) (Result, error) {
	var res Result
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		res = Result{}
		events, err := store.LockUnfiredEvents(ctx, tx, s, limit)
		if err != nil || len(events) == 0 {
			return err
		}
		// The database's clock dates the firings, as retention reads
		// them by it.
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		var counts []store.TriggerFirings
		for _, e := range events {
			started, err := fireEvent(ctx, tx, lim, e, now, log)
			if err != nil {
				return err
			}
			res.Events++
			for _, c := range started {
				res.Started += c.Started
			}
			counts = append(counts, started...)
		}
		return store.CountFirings(ctx, tx, counts)
	})
	if err != nil {
		return Result{}, err
	}
	return res, nil
}

// fireEvent starts what each trigger of e asks for, each in a savepoint,
// marks e fired, and returns what each trigger started.
func fireEvent(ctx context.Context, tx pgx.Tx, lim leases.Limits, e *store.UnfiredEvent, now time.Time, log *zap.Logger) ([]store.TriggerFirings, error) {
	triggers, err := store.MatchingTriggers(ctx, tx, e)
	if err != nil {
		return nil, err
	}
	var started []store.TriggerFirings
	var failures []error
	for _, t := range triggers {
		tags := map[string]any{"ffd_trigger": t.Name, "ffd_event": e.ID.String(), "ffd_event_key": e.Key}
		var made bool
		err := store.InTx(ctx, tx, func(sp pgx.Tx) (err error) {
			made, err = schedule.Start(ctx, sp, lim, schedule.Firing{Namespace: t.Namespace, Target: t.Target,
				Params: t.Params, Key: Key(t.Namespace, t.Name, e.ID), FlowID: FlowID(t.Name, e.ID), Tags: tags, Payload: e.Payload})
			return err
		})
		switch {
		case err == nil:
		case outbox.Transient(err) || ctx.Err() != nil:
			// The database failed for now (a lost connection, a
			// conflict, a restart): the whole pass rolls back and the
			// next one fires the event.
			return nil, fmt.Errorf("fire event %s by trigger %s: %w", e.ID, t.Name, err)
		default:
			// The target cannot start for this event (its template no
			// longer valid, a name taken, a row a check refuses): kept
			// on the event, whose other triggers fire, rather than
			// refused again at every pass ahead of the events behind.
			log.Error("trigger failed to start its target for an event", zap.String("trigger", t.Name),
				zap.String("event", e.Name), zap.String("event_id", e.ID.String()), zap.Error(err))
			failures = append(failures, fmt.Errorf("trigger %s: %w", t.Name, err))
			continue
		}
		if made {
			started = append(started, store.TriggerFirings{Partition: e.Partition, Trigger: t, Started: 1})
		}
	}
	failure := ""
	if err := errors.Join(failures...); err != nil {
		failure = leases.CleanText(err.Error(), 4096)
	}
	return started, store.MarkFired(ctx, tx, e, now, len(started), failure) // one each
}
