package listener

import (
	"strconv"
	"strings"
	"time"

	"github.com/flowfabric/ffd/internal/store"
)

// Fanout hands what the daemon's listener hears to the workers that act on
// it: completion event ids to the cascade pool (Events), lease event ids
// and due times to the timeout worker (LeaseIDs, DueAt), a nudge to the
// sibling-cancel pool (Siblings) and sweep requests to the sweeper
// (SweepNow). Nothing here blocks the listener: a hint that does not fit
// its queue is dropped and reported to OnDrop, and the sweep finds the
// work anyway.
type Fanout struct {
	events   chan int64
	leaseIDs chan int64
	dueAt    chan time.Time
	siblings chan struct{}
	sweepNow chan bool
	onDrop   func(queue string)
}

// Queue names passed to a Fanout's OnDrop, as metric labels.
const (
	QueueCascade = "cascade"
	QueueTimeout = "timeout"
)

// NewFanout builds a fan-out whose id queues hold size hints each; onDrop
// (nil: nothing) is told the queue of every hint dropped.
func NewFanout(size int, onDrop func(queue string)) *Fanout {
	if onDrop == nil {
		onDrop = func(string) {}
	}
	return &Fanout{
		events:   make(chan int64, size),
		leaseIDs: make(chan int64, size),
		dueAt:    make(chan time.Time, size),
		siblings: make(chan struct{}, 1),
		sweepNow: make(chan bool, 1),
		onDrop:   onDrop,
	}
}

// Events carries completion event ids, for the cascade pool.
func (f *Fanout) Events() <-chan int64 { return f.events }

// LeaseIDs carries lease event ids, for the timeout worker.
func (f *Fanout) LeaseIDs() <-chan int64 { return f.leaseIDs }

// DueAt carries the times requeued executions come due, for the timeout
// worker.
func (f *Fanout) DueAt() <-chan time.Time { return f.dueAt }

// Siblings carries nudges for the sibling-cancel pool.
func (f *Fanout) Siblings() <-chan struct{} { return f.siblings }

// SweepNow carries sweep requests; true asks for a full sweep (right after
// a (re)connect: no grace).
func (f *Fanout) SweepNow() <-chan bool { return f.sweepNow }

// Handle fans a notification out; it is a Listener's Config.Handle.
func (f *Fanout) Handle(n Notification) {
	queue, name := f.events, QueueCascade
	switch n.Topic {
	case Completion:
	case Lease:
		if ms, ok := strings.CutPrefix(n.Payload, store.DuePrefix); ok {
			f.due(ms)
			return
		}
		queue, name = f.leaseIDs, QueueTimeout
	default:
		return
	}
	lo, hi, ok := parseIDRange(n.Payload)
	if !ok {
		return // an empty payload: nothing for the daemon (migration 00004)
	}
	if hi-lo >= maxHintRange {
		// A range this wide is rare (a huge statement interleaved with
		// others); the sweep finds its events without expanding it.
		f.onDrop(name)
		f.RequestSweep(false)
		return
	}
	for id := lo; id <= hi; id++ {
		select {
		case queue <- id:
		default:
			f.onDrop(name)
			return
		}
	}
}

// due hands a due time ("due:<unix ms>") to the timeout worker.
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

// maxHintRange bounds how many ids one notification's range is expanded
// into.
const maxHintRange = 10000

// parseIDRange reads a notification payload: "id" or "lo-hi" (one per
// statement, migration 00005). Ids in the range that are not the daemon's
// concern (another table's, dispatched already) are filtered by the
// queries they feed.
func parseIDRange(payload string) (lo, hi int64, ok bool) {
	a, b, isRange := strings.Cut(payload, "-")
	lo, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, err = strconv.ParseInt(b, 10, 64)
	if err != nil || hi < lo {
		return 0, 0, false
	}
	return lo, hi, true
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
