package console

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/listener"
)

// ApplicationName names the console's LISTEN connection.
const ApplicationName = "ffd-console"

// hub fans the engine's notifications out to open pages. It listens only
// while at least one page is subscribed.
type hub struct {
	conn *pgx.ConnConfig
	log  *zap.Logger

	mu   sync.Mutex
	subs map[chan struct{}]struct{}
	n    *listener.Listener
}

func newHub(conn *pgx.ConnConfig, log *zap.Logger) *hub {
	return &hub{conn: conn, log: log, subs: map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a (coalesced) signal after
// each completion or lease notification, and a function to unsubscribe.
func (h *hub) subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs[ch] = struct{}{}
	if h.n == nil {
		n, err := listener.New(listener.Config{
			ConnConfig: h.conn, Topics: []listener.Topic{listener.Completion, listener.Lease},
			Handle: func(listener.Notification) { h.signal() }, ApplicationName: ApplicationName,
			OnConnect: func(context.Context, bool) { h.signal() }, Logger: h.log.Named("listen"),
		})
		if err != nil {
			h.log.Warn("console live updates off", zap.Error(err))
		} else {
			h.n = n
			_ = n.Start(context.Background()) // returns at once; never fails

		}
	}
	return ch, func() { h.unsubscribe(ch) }
}

func (h *hub) unsubscribe(ch chan struct{}) {
	h.mu.Lock()
	delete(h.subs, ch)
	var stop *listener.Listener
	if len(h.subs) == 0 {
		stop, h.n = h.n, nil
	}
	h.mu.Unlock()
	if stop != nil {
		_ = stop.Stop(context.Background())
	}
}

// signal wakes every subscriber; a subscriber already woken stays so.
func (h *hub) signal() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// close stops listening.
func (h *hub) close() {
	h.mu.Lock()
	n := h.n
	h.n = nil
	h.mu.Unlock()
	if n != nil {
		_ = n.Stop(context.Background())
	}
}
