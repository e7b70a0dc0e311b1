package ffd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// DefaultWaitPollInterval is how often a wait (WaitExecution, WaitFlow)
// reads its object again when no notification has woken it: the fallback
// for a notification lost while the listener reconnected, or never sent
// (a pool behind PgBouncer in transaction pooling, where LISTEN hears
// nothing).
const DefaultWaitPollInterval = time.Second

// WaitApplicationName is the application_name of the connection a client
// LISTENs on while it waits for results.
const WaitApplicationName = "ffd-wait"

// WaitExecution blocks until the execution is terminal and returns it
// (Result holds a completed execution's result), or until ctx ends. It is
// woken by the completion notification of the execution's partition and
// reads the row again every Config.WaitPollInterval besides. A missing
// execution is a NotFoundError at once.
func (c *Client) WaitExecution(ctx context.Context, id ExecutionID) (*Execution, error) {
	if err := leases.ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	var x *Execution
	err := c.waitFor(ctx, id.Partition, func(ctx context.Context) (bool, error) {
		var err error
		x, err = leases.Get(ctx, c.pool, id)
		if err != nil {
			return false, err
		}
		return x.State.Terminal(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for execution %s: %w", id, err)
	}
	return x, nil
}

// WaitFlow blocks until the flow is terminal and returns it with every
// member as it ended, or until ctx ends. Members a cancellation left
// running (cancel policy flow_only) are returned as they are. A missing
// flow is a NotFoundError at once.
func (c *Client) WaitFlow(ctx context.Context, flowID uuid.UUID) (*FlowOutcome, error) {
	var f *Flow
	err := c.waitFor(ctx, ident.Partition(flowID), func(ctx context.Context) (bool, error) {
		var err error
		f, err = flows.Get(ctx, c.pool, flowID)
		if err != nil {
			return false, err
		}
		return f.State != FlowOpen, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for flow %s: %w", flowID, err)
	}
	out := &FlowOutcome{Steps: map[string]*Execution{}}
	if out.Flow, err = flows.Describe(ctx, c.pool, flowID); err != nil {
		return nil, fmt.Errorf("read finished flow %s: %w", flowID, err)
	}
	if out.Members, err = store.FlowMembers(ctx, c.pool, flowID); err != nil {
		return nil, fmt.Errorf("read members of flow %s: %w", flowID, err)
	}
	for _, m := range out.Members {
		if m.Step != "" {
			out.Steps[m.Step] = m
		}
	}
	return out, nil
}

// waitFor calls check until it reports done, an error, or ctx ends:
// first at once, then whenever a completion notification names part (or
// names no partition), the listener (re)connects, or the poll interval
// passes.
func (c *Client) waitFor(ctx context.Context, part int16, check func(context.Context) (bool, error)) error {
	w := c.waits.join(part)
	defer c.waits.leave(w)
	for {
		done, err := check(ctx)
		if err != nil || done {
			return err
		}
		t := time.NewTimer(jitter(c.cfg.WaitPollInterval))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// waitHub is a client's one LISTEN connection for its waits, however many
// there are: started by the first wait, stopped when the last one ends,
// so that a client needs no Close.
type waitHub struct {
	client *Client

	mu      sync.Mutex
	waiters map[*waiter]struct{}
	stop    func()
}

// waiter is one wait's registration: the partition it waits on, and
// where it is woken (a buffer of one: wake-ups coalesce).
type waiter struct {
	part int16
	wake chan struct{}
}

func (h *waitHub) join(part int16) *waiter {
	w := &waiter{part: part, wake: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters == nil {
		h.waiters = map[*waiter]struct{}{}
	}
	h.waiters[w] = struct{}{}
	if h.stop == nil {
		h.stop = h.start()
	}
	return w
}

func (h *waitHub) leave(w *waiter) {
	h.mu.Lock()
	delete(h.waiters, w)
	var stop func()
	if len(h.waiters) == 0 {
		stop, h.stop = h.stop, nil
	}
	h.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// start runs the listener; the function it returns stops it and returns
// once it has stopped. Without a listener (it could not be built) the
// waits poll.
func (h *waitHub) start() func() {
	cfg := h.client.pool.Config().ConnConfig.Copy()
	if h.client.cfg.ListenConnConfig != nil {
		cfg = h.client.cfg.ListenConnConfig.Copy()
	}
	if !session.Guarded(&cfg.Config) {
		session.Apply(session.Default(), cfg)
	}
	log := h.client.cfg.Logger.Named("wait")
	l, err := listener.New(listener.Config{
		ConnConfig:      cfg,
		ApplicationName: WaitApplicationName,
		Topics:          []listener.Topic{listener.Completion},
		Handle:          h.notified,
		// Whatever ended while no LISTEN was up was heard by nobody.
		OnConnect: func(context.Context, bool) { h.wakeAll() },
		Logger:    log,
	})
	if err == nil {
		err = l.Start(context.Background())
	}
	if err != nil {
		log.Warn("wait listener; polling only", zap.Error(err))
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = l.Stop(ctx)
	}
}

// notified wakes the waits on the partitions a completion notification
// names; one that names none (events with nothing to cascade: a solo
// execution's, a flow's own) or cannot be read wakes them all.
func (h *waitHub) notified(n listener.Notification) {
	parts, ok := store.ParsePartitions(n.Payload)
	if !ok || len(parts) == 0 {
		h.wakeAll()
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		for _, p := range parts {
			if p == w.part {
				w.poke()
				break
			}
		}
	}
}

func (h *waitHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w := range h.waiters {
		w.poke()
	}
}

func (w *waiter) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}
