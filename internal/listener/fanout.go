package listener

import (
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// Fanout hands what the daemon's listener hears to the workers that act on
// it: the partitions holding completion events to dispatch to the cascade
// pool (Dispatch, TakePartitions), due times to the timeout worker
// (DueAt), a nudge to the sibling-cancel pool (Siblings) and sweep
// requests to the sweeper (SweepNow). Nothing here blocks the listener:
// partitions coalesce into a set (at most ffdtype.Partitions entries, so
// none is ever dropped), and a due time that does not fit its queue is
// dropped and reported to OnDrop; the sweep finds the work anyway.
type Fanout struct {
	mu       sync.Mutex
	marked   [ffdtype.Partitions]bool
	parts    []int16       // marked partitions, in the order marked
	dispatch chan struct{} // a token while parts is not empty
	dueAt    chan time.Time
	siblings chan struct{}
	sweepNow chan bool
	events   chan struct{}
	subflows chan struct{}
	ends     chan struct{}
	onDrop   func(queue string)
}

// Queue names passed to a Fanout's OnDrop, as metric labels.
const (
	QueueTimeout = "timeout"
)

// NewFanout builds a fan-out whose due-time queue holds size hints; onDrop
// (nil: nothing) is told the queue of every hint dropped.
func NewFanout(size int, onDrop func(queue string)) *Fanout {
	if onDrop == nil {
		onDrop = func(string) {}
	}
	return &Fanout{
		dispatch: make(chan struct{}, 1),
		dueAt:    make(chan time.Time, size),
		siblings: make(chan struct{}, 1),
		sweepNow: make(chan bool, 1),
		events:   make(chan struct{}, 1),
		subflows: make(chan struct{}, 1),
		ends:     make(chan struct{}, 1),
		onDrop:   onDrop,
	}
}

// Dispatch carries a token while partitions wait for the cascade pool: a
// worker that receives one calls TakePartitions.
func (f *Fanout) Dispatch() <-chan struct{} { return f.dispatch }

// TakePartitions returns the partitions marked since the last take, at
// most limit (0: all), oldest marked first, and unmarks them. When some
// remain it leaves a token on Dispatch for another worker.
func (f *Fanout) TakePartitions(limit int) []int16 {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := len(f.parts)
	if limit > 0 && n > limit {
		n = limit
	}
	out := make([]int16, n)
	copy(out, f.parts)
	for _, p := range out {
		f.marked[p] = false
	}
	f.parts = append(f.parts[:0], f.parts[n:]...)
	if len(f.parts) > 0 {
		f.signal()
	}
	return out
}

// MarkPartitions marks partitions as holding completion events to
// dispatch: the cascade pool calls it again for a partition whose take
// filled its batch.
func (f *Fanout) MarkPartitions(parts []int16) {
	if len(parts) == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range parts {
		if p < 0 || int(p) >= len(f.marked) || f.marked[p] {
			continue
		}
		f.marked[p] = true
		f.parts = append(f.parts, p)
	}
	f.signal()
}

// signal leaves a token on Dispatch unless one is there; f.mu is held.
func (f *Fanout) signal() {
	select {
	case f.dispatch <- struct{}{}:
	default:
	}
}

// DueAt carries the times requeued executions come due, for the timeout
// worker.
func (f *Fanout) DueAt() <-chan time.Time { return f.dueAt }

// Events carries a nudge when events were published, for the daemon's
// triggerer.
func (f *Fanout) Events() <-chan struct{} { return f.events }

// Subflows carries a nudge when sub-flow steps may start, for the
// daemon's linker.
func (f *Fanout) Subflows() <-chan struct{} { return f.subflows }

// Ends carries a nudge on every completion notification: an execution
// or a flow ended, which may end a sub-flow or start compensations (the
// linker).
func (f *Fanout) Ends() <-chan struct{} { return f.ends }

// nudge leaves a token on c unless one is there: a pending nudge covers
// every notification behind it.
func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// Siblings carries nudges for the sibling-cancel pool.
func (f *Fanout) Siblings() <-chan struct{} { return f.siblings }

// SweepNow carries sweep requests; true asks for a full sweep (right after
// a (re)connect: no grace).
func (f *Fanout) SweepNow() <-chan bool { return f.sweepNow }

// Handle fans a notification out; it is a Listener's Config.Handle.
// Payloads are those docs/schema.md ("Notifications") describes; one the
// daemon cannot read is ignored (the sweep covers what it announced).
func (f *Fanout) Handle(n Notification) {
	switch n.Topic {
	case Completion:
		nudge(f.ends)
		// Empty: events born dispatched, nothing for the cascade.
		if parts, ok := store.ParsePartitions(n.Payload); ok {
			f.MarkPartitions(parts)
		}
	case Event:
		if slices.Contains(store.SplitPayload(n.Payload), store.EventSubflow) {
			nudge(f.subflows)
			return
		}
		nudge(f.events)
	case Lease:
		// Partitions of lease events are for outbox consumers; the timeout
		// worker learns of renewed leases from its reloads.
		for _, it := range store.SplitPayload(n.Payload) {
			if ms, ok := strings.CutPrefix(it, store.DuePrefix); ok {
				f.due(ms)
			}
		}
	}
}

// due hands a due time ("<unix ms>") to the timeout worker.
func (f *Fanout) due(ms string) {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return
	}
	select {
	case f.dueAt <- time.UnixMilli(n):
	default:
		f.onDrop(QueueTimeout)
	}
}

// RequestSweep asks the sweeper for a sweep now; afterConnect asks for a
// full one (no grace: the notifications of the gap are lost).
func (f *Fanout) RequestSweep(afterConnect bool) {
	select {
	case f.sweepNow <- afterConnect:
	default:
		if afterConnect {
			// A sweep is already requested; make sure it is the full kind.
			select {
			case <-f.sweepNow:
			default:
			}
			select {
			case f.sweepNow <- true:
			default:
			}
		}
	}
}

// CancelSiblings nudges the sibling-cancel pool.
func (f *Fanout) CancelSiblings() {
	select {
	case f.siblings <- struct{}{}:
	default:
	}
}
