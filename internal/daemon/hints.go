package daemon

import (
	"strconv"
	"strings"
	"time"

	"github.com/flowfabric/ffd/internal/notifier"
	"github.com/flowfabric/ffd/internal/store"
)

// hints are the notifications, fanned out to the components that act on
// them: completion event ids to the cascade pool, lease event ids and due
// times to the timeout worker, a nudge to the sibling pool, sweep requests to the
// sweeper. Nothing here blocks the notifier: a hint that does not fit its
// queue is dropped and counted, and the sweep finds the work anyway.
type hints struct {
	m        *Metrics
	events   chan int64
	leaseIDs chan int64
	dueAt    chan time.Time // requeued executions come due then
	siblings chan struct{}
	sweepNow chan bool // true: right after a (re)connect, no grace
}

func newHints(m *Metrics, size int) *hints {
	return &hints{
		m:        m,
		events:   make(chan int64, size),
		leaseIDs: make(chan int64, size),
		dueAt:    make(chan time.Time, size),
		siblings: make(chan struct{}, 1),
		sweepNow: make(chan bool, 1),
	}
}

// handle fans a notification out.
func (h *hints) handle(n notifier.Notification) {
	queue, name := h.events, "cascade"
	switch n.Topic {
	case notifier.Completion:
	case notifier.Lease:
		if ms, ok := strings.CutPrefix(n.Payload, store.DuePrefix); ok {
			h.due(ms)
			return
		}
		queue, name = h.leaseIDs, "timeout"
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
		h.m.droppedHints.WithLabelValues(name).Inc()
		h.requestSweep(false)
		return
	}
	for id := lo; id <= hi; id++ {
		select {
		case queue <- id:
		default:
			h.m.droppedHints.WithLabelValues(name).Inc()
			return
		}
	}
}

// due hands a due time ("due:<unix ms>") to the timeout worker.
func (h *hints) due(ms string) {
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return
	}
	select {
	case h.dueAt <- time.UnixMilli(n):
	default:
		h.m.droppedHints.WithLabelValues("timeout").Inc()
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

// requestSweep asks the sweeper for a sweep now; afterConnect asks for a
// full one (no grace: the notifications of the gap are lost).
func (h *hints) requestSweep(afterConnect bool) {
	select {
	case h.sweepNow <- afterConnect:
	default:
		if afterConnect {
			// A sweep is already requested; make sure it is the full kind.
			select {
			case <-h.sweepNow:
			default:
			}
			select {
			case h.sweepNow <- true:
			default:
			}
		}
	}
}

// cancelSiblings nudges the sibling pool.
func (h *hints) cancelSiblings() {
	select {
	case h.siblings <- struct{}{}:
	default:
	}
}
