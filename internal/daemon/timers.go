package daemon

import (
	"container/heap"
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/store"
)

// maxTimers bounds the timer heap; beyond it the sweep covers the rest.
const maxTimers = 100000

// timerWorker keeps the soonest lease lapses, attempt timeouts, deadlines
// and due delays in memory and acts at the moment each passes. It is fed by
// its own reads of the ff_execution indexes (every reload) and by the due
// times requeues announce. A lease taken or renewed after the last reload
// has no timer at its new expiry until the next reload (notifications
// name partitions, not leases: docs/schema.md, "Notifications"); one
// that lapses before it is expired by the sweep, at most a sweep interval
// late. Every action re-checks the rows under lock, so stale timers (a
// lease renewed or released since) cost a place in one batched statement.
type timerWorker struct {
	runner
	e      *env
	h      timerHeap
	latest map[timerKey]time.Time // newest time scheduled per timer, to skip stale and repeated ones without a query
}

// timerKey names what a timer acts on: a lease (an execution at an epoch),
// a deadline or a delay. Each reload reads the same rows again; the key
// keeps one timer per thing, at its newest time.
type timerKey struct {
	kind  store.TimerKind
	id    ffdtype.ExecutionID
	epoch int64
}

func newTimerWorker(e *env) *timerWorker {
	return &timerWorker{e: e, latest: map[timerKey]time.Time{}}
}

// Start runs the worker.
func (w *timerWorker) Start(ctx context.Context) error { return w.start(ctx, w.run) }

func (w *timerWorker) run(ctx context.Context) {
	workCtx := w.e.work
	w.reload(workCtx)
	// Every sweep interval: a claim writes no lease event, so a reload is
	// how a lease gets its timer, and a lease shorter than the interval
	// between reloads would otherwise be left to the sweep.
	reload := time.NewTicker(fallbackEvery(ctx, w.e, max(w.e.cfg.SweepInterval, minReload)))
	defer reload.Stop()
	for {
		next := time.Hour
		if len(w.h) > 0 {
			next = max(time.Until(w.h[0].At), 0)
		}
		fire := time.NewTimer(next)
		select {
		case <-ctx.Done():
			fire.Stop()
			return
		case at := <-w.e.fanout.DueAt():
			heap.Push(&w.h, store.Timer{Kind: store.TimerDue, At: at})
		case <-reload.C:
			w.reload(workCtx)
		case <-fire.C:
			w.fireDue(workCtx)
		}
		fire.Stop()
	}
}

// minReload bounds how often the timer worker re-reads the indexes.
const minReload = 100 * time.Millisecond

func (w *timerWorker) reload(ctx context.Context) {
	ts, err := store.UpcomingTimers(ctx, w.e.cfg.Pool, DefaultTimerLimit)
	if err != nil {
		w.e.log.Warn("timer worker: read upcoming timers; the sweep covers them", zap.Error(err))
		return
	}
	w.add(ts)
}

func (w *timerWorker) add(ts []store.Timer) {
	for _, t := range ts {
		if len(w.h) >= maxTimers {
			return // the sweep covers what does not fit
		}
		if !t.ID.IsZero() {
			k := timerKey{t.Kind, t.ID, t.Epoch}
			if prev, ok := w.latest[k]; ok && !t.At.After(prev) {
				continue // already scheduled at this time or later
			}
			w.latest[k] = t.At
		}
		heap.Push(&w.h, t)
	}
}

func (w *timerWorker) fireDue(ctx context.Context) {
	now := time.Now()
	dueLanes := false
	var check []store.LeaseRef
	for len(w.h) > 0 && !w.h[0].At.After(now) {
		t := heap.Pop(&w.h).(store.Timer)
		if !t.ID.IsZero() {
			k := timerKey{t.Kind, t.ID, t.Epoch}
			latest, ok := w.latest[k]
			if ok && latest.After(t.At) {
				continue // moved later since (a renewal): a later timer stands for it
			}
			delete(w.latest, k)
		}
		switch t.Kind {
		case store.TimerLease:
			w.e.m.leaseTimers.WithLabelValues("checked").Inc()
			check = append(check, store.LeaseRef{ID: t.ID, Epoch: t.Epoch})
		case store.TimerDeadline:
			ok, err := leases.ExpireDeadline(ctx, w.e.cfg.Pool, t.ID)
			if err != nil {
				w.e.log.Warn("timer worker: expire deadline; the sweep will retry", zap.String(logging.FieldExecutionID, t.ID.String()), zap.Error(err))
				continue
			}
			if ok {
				w.e.m.deadlinesExpired.Inc()
				w.e.log.Info("deadline passed; execution expired", zap.String(logging.FieldExecutionID, t.ID.String()), zap.String(logging.FieldLane, t.Lane))
			}
		case store.TimerDue:
			dueLanes = true
		}
	}
	w.expire(ctx, check)
	if dueLanes {
		_ = w.e.due.notify(ctx) // logged; the sweep counts its failures
	}
}

// expire checks the leases whose timers came due, in one transaction: most
// ended long before (a timer loaded from the lease-expiry index does not
// learn that its lease was released), and those cost nothing but their
// entries in the one statement.
func (w *timerWorker) expire(ctx context.Context, check []store.LeaseRef) {
	if len(check) == 0 {
		return
	}
	w.e.m.leaseChecks.Inc()
	res, ended, err := leases.ExpireLapsed(ctx, w.e.cfg.Pool, check)
	if err != nil {
		w.e.log.Warn("timer worker: expire leases; the sweep will retry", zap.Int("leases", len(check)), zap.Error(err))
		return
	}
	if res.Retried+res.Terminated == 0 {
		return
	}
	w.e.m.recordExpired(res)
	for _, id := range ended {
		w.e.log.Info("lease expired", zap.String(logging.FieldExecutionID, id.String()))
	}
}

// timerHeap is a min-heap by At.
type timerHeap []store.Timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].At.Before(h[j].At) }
func (h timerHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timerHeap) Push(x any)        { *h = append(*h, x.(store.Timer)) }
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	*h = old[:len(old)-1]
	return t
}
