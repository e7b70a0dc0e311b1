package ffd

import (
	"context"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/sourcegraph/conc"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// WorkerApplicationName is the application_name of a worker's LISTEN
// connection, to find it in pg_stat_activity.
const WorkerApplicationName = "ffd-worker"

// claimer is the worker's first part: the claim loops, one per lane. Each
// claims its lane into the executor's free slots whenever ff_ready names
// the lane, a run ends that may leave it room, or the jittered poll
// interval passes, so a lane whose claims are slow (a controlled lane on
// a distributed Postgres: a dozen statements) never delays another's.
// The loops reserve the slots they claim into (reserve), so together
// they never claim more than the worker may run; a loop that claims
// while others do takes its share. The claimer also owns the worker's
// LISTEN connection, handing ff_revoke to the executor. While LISTEN is
// down it polls, and asks the database at each poll which held leases
// are gone (a revoke sent meanwhile reached nobody).
type claimer struct {
	client *Client
	cfg    *WorkerConfig
	name   string
	log    *zap.Logger
	exec   *executor

	lanes []string                 // cfg.Lanes, each once
	wakes map[string]chan struct{} // per lane
	// listening is closed once the first LISTEN has succeeded (or failed:
	// the claimer then polls); no claim is made before, so that no lease
	// is held while its ff_revoke could go unheard.
	listening     chan struct{}
	listeningOnce sync.Once
	// listenDown is set while the LISTEN connection is down.
	listenDown atomic.Bool
	// more: the lanes whose last claim filled every slot it reserved, so
	// they likely have more due work; a run that ends then claims them
	// again at once. held: the lanes whose last claim flow control held
	// back (a key at its limit, a cap): a run of such a lane that ends
	// may free the room, so it claims that lane again at once too. Only
	// that lane's runs: on a distributed Postgres a controlled claim is
	// a dozen round trips, and re-claiming a held lane at every run's
	// end of any lane saturated the claim loop (the fault suite's drain
	// on Citus). more is guarded by heldMu; held is a flag per lane (its
	// map fixed at construction), read without the lock on every
	// recorded success.
	heldMu sync.Mutex
	held   map[string]*atomic.Bool
	more   map[string]bool

	// slotMu guards reserved (slots reserved by claims in flight) and
	// claiming (how many are in flight).
	slotMu             sync.Mutex
	reserved, claiming int

	mu       sync.Mutex
	stop     context.CancelFunc
	stopping chan struct{} // closed by Stop: claim nothing more
	loops    *conc.WaitGroup
}

// newClaimer builds the claim loop of a worker named name over exec.
func newClaimer(client *Client, cfg *WorkerConfig, name string, log *zap.Logger, exec *executor) *claimer {
	c := &claimer{client: client, cfg: cfg, name: name, log: log, exec: exec,
		wakes: map[string]chan struct{}{}, held: map[string]*atomic.Bool{}, listening: make(chan struct{}), stopping: make(chan struct{})}
	for _, lane := range cfg.Lanes {
		if _, dup := c.wakes[lane]; !dup {
			c.wakes[lane] = make(chan struct{}, 1)
			c.held[lane] = &atomic.Bool{}
			c.lanes = append(c.lanes, lane)
		}
	}
	exec.onDone = func(ended string) {
		c.heldMu.Lock()
		defer c.heldMu.Unlock()
		for _, lane := range c.lanes {
			if c.more[lane] || (lane == ended && c.isHeld(lane)) {
				c.signalLane(lane)
			}
		}
	}
	// A success is recorded after its run ends (the completer batches
	// it): the claim its run's end woke may have found its key still at
	// the limit. Waking the lane again once it is recorded lets a key of
	// limit 1 run its next execution at once, not at the next poll (one
	// execution a poll interval before).
	exec.onRecorded = func(lane string) {
		if c.isHeld(lane) {
			c.signalLane(lane)
		}
	}
	return c
}

// Start runs the listen and claim loops until Stop; ctx's values reach
// the claims, its cancellation ends the loops too. A second Start is a
// no-op.
func (c *claimer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.loops != nil {
		return nil
	}
	ctx, c.stop = context.WithCancel(ctx)
	c.loops = &conc.WaitGroup{}
	c.loops.Go(func() { c.listen(ctx) })
	for i, lane := range c.lanes {
		c.loops.Go(func() { c.fetch(ctx, lane, i == 0) })
	}
	c.loops.Go(func() { c.client.stall.watch(ctx, c.client) })
	c.signal()
	return nil
}

// Stop stops claiming at once (a claim in flight is cancelled) and
// returns once the loops have ended, or ctx's error when ctx ends first.
func (c *claimer) Stop(ctx context.Context) error {
	c.mu.Lock()
	loops := c.loops
	if loops != nil {
		select {
		case <-c.stopping:
		default:
			close(c.stopping)
			c.stop()
		}
	}
	c.mu.Unlock()
	if loops == nil {
		return nil
	}
	ended := make(chan struct{})
	go func() { loops.Wait(); close(ended) }()
	select {
	case <-ended:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *claimer) setHeld(lane string, held bool) {
	if h := c.held[lane]; h != nil {
		h.Store(held)
	}
}

// isHeld reports whether lane's last claim was held back by flow control.
func (c *claimer) isHeld(lane string) bool {
	h := c.held[lane]
	return h != nil && h.Load()
}

func (c *claimer) setMore(lane string, more bool) {
	c.heldMu.Lock()
	defer c.heldMu.Unlock()
	if c.more == nil {
		c.more = map[string]bool{}
	}
	c.more[lane] = more
}

// signal wakes every lane's loop.
func (c *claimer) signal() {
	for lane := range c.wakes {
		c.signalLane(lane)
	}
}

func (c *claimer) signalLane(lane string) {
	select {
	case c.wakes[lane] <- struct{}{}:
	default:
	}
}

// reserve reserves slots for a claim: every free slot not reserved
// already, or, while other lanes' claims are in flight, an equal share
// with them (at least one); and never more than the lane's share of the
// worker's concurrency, so that a claim that waits long (a slow lane's)
// cannot hold every slot while the other lanes have work. A busy lane
// beside idle ones fills the worker in as many claims as there are
// lanes. release gives them back once the claimed executions run (and
// hold their slots themselves).
func (c *claimer) reserve() int {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	free := c.exec.Free() - c.reserved
	if free <= 0 {
		return 0
	}
	lanes := len(c.lanes)
	n := min(max(1, free/(c.claiming+1)), (c.cfg.Concurrency+lanes-1)/lanes)
	c.reserved += n
	c.claiming++
	return n
}

func (c *claimer) release(n int) {
	c.slotMu.Lock()
	defer c.slotMu.Unlock()
	c.reserved -= n
	c.claiming--
}

// fetch claims lane while there are free slots and due work; it sleeps
// until a notification for the lane, a finished run that may leave it
// room, or the jittered poll interval. The first lane's loop also asks,
// once a poll while LISTEN is down, which held leases are gone.
func (c *claimer) fetch(ctx context.Context, lane string, first bool) {
	select {
	case <-c.listening:
	case <-c.stopping:
		return
	}
	for {
		if first && c.listenDown.Load() {
			// Revocations sent while the LISTEN connection is down reach
			// nobody: ask, once a poll, which held leases are gone.
			c.exec.RecheckLeases(ctx)
		}
		wait := jitter(c.cfg.PollInterval)
		if retry := c.claimFree(ctx, lane); retry > 0 && retry < wait {
			// A rate-limited lane's next token comes before the poll.
			wait = retry
		}
		timer := time.NewTimer(wait)
		select {
		case <-c.stopping:
			timer.Stop()
			return
		case <-c.wakes[lane]:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// claimFree claims lane into the slots it reserves, again while a claim
// fills them; it returns how soon the lane's rate lets held-back
// executions start (0: it held none back).
func (c *claimer) claimFree(ctx context.Context, lane string) (retry time.Duration) {
	for {
		select {
		case <-c.stopping:
			return retry
		default:
		}
		n := c.reserve()
		if n == 0 {
			// No slot: the next run to end wakes this lane, which
			// takes its turn beside the lanes that filled theirs.
			c.setMore(lane, true)
			return retry
		}
		xs, th, err := leases.ClaimThrottled(ctx, c.client.pool, ClaimParams{Lane: lane, Worker: c.name, Capabilities: c.cfg.Capabilities, Max: n})
		for _, x := range xs {
			c.exec.Run(x)
		}
		c.release(n)
		c.cfg.Metrics.claimed(len(xs))
		if err == nil {
			c.setHeld(lane, th.Held)
		}
		if th.Held {
			c.cfg.Metrics.throttle(lane)
			c.log.Debug("claim held back by flow control", zap.String(logging.FieldLane, lane),
				zap.Int("claimed", len(xs)), zap.Duration("retry", th.Retry))
		}
		retry = th.Retry
		c.setMore(lane, err == nil && len(xs) == n)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("claim failed; retrying at the next poll", zap.String(logging.FieldLane, lane), zap.Error(err))
			}
			return retry
		}
		if len(xs) < n {
			return retry
		}
	}
}

// listen wakes the claim loop on ff_ready for the worker's lanes and
// hands ff_revoke to the executor, through a listener on a connection of
// its own; after every (re)connect it has the executor re-check the
// leases it holds and claims, since notifications sent meanwhile are
// lost. It returns when ctx ends or the claimer stops.
func (c *claimer) listen(ctx context.Context) {
	if c.cfg.PollOnly {
		c.listeningOnce.Do(func() { close(c.listening) })
		return
	}
	cfg := c.client.pool.Config().ConnConfig.Copy()
	if c.cfg.ListenConnConfig != nil {
		cfg = c.cfg.ListenConnConfig.Copy()
	}
	if !session.Guarded(&cfg.Config) {
		// The application's pool has no guard of its own; this connection
		// is ffd's, so it gets ffd's.
		session.Apply(session.Default(), cfg)
	}
	l, err := listener.New(listener.Config{
		ConnConfig:      cfg,
		ApplicationName: WorkerApplicationName,
		Topics:          []listener.Topic{listener.Ready, listener.Revoke},
		Handle:          c.notified,
		OnConnect: func(ctx context.Context, _ bool) {
			c.listenDown.Store(false)
			c.listeningOnce.Do(func() { close(c.listening) })
			// A lease taken away while no LISTEN was active sent its
			// ff_revoke to nobody: ask the database about every lease
			// held, once, now that later revokes will be heard.
			c.exec.RecheckLeases(ctx)
			c.signal()
		},
		OnDisconnect: func(error) {
			// Poll meanwhile, and re-check held leases at each poll.
			c.listenDown.Store(true)
			c.listeningOnce.Do(func() { close(c.listening) })
		},
		Logger: c.log.Named("listener"),
	})
	if err != nil {
		c.log.Error("worker listener; polling only", zap.Error(err))
		c.listeningOnce.Do(func() { close(c.listening) })
		return
	}
	if err := l.Start(ctx); err != nil {
		c.log.Error("worker listener; polling only", zap.Error(err))
		c.listeningOnce.Do(func() { close(c.listening) })
		return
	}
	defer func() { _ = l.Stop(context.WithoutCancel(ctx)) }()
	select {
	case <-ctx.Done():
	case <-c.stopping:
	}
}

// notified handles one notification; it must not block.
func (c *claimer) notified(n listener.Notification) {
	switch n.Topic {
	case listener.Ready:
		// Lanes with work due, comma-separated (lane names hold no comma).
		for _, lane := range store.SplitPayload(n.Payload) {
			if slices.Contains(c.cfg.Lanes, lane) {
				c.signalLane(lane)
			}
		}
	case listener.Revoke:
		// "partition:uuid:epoch" items, comma-separated, the epoch being
		// the one the lease was held at (0: whichever).
		for _, it := range store.SplitPayload(n.Payload) {
			if id, epoch, ok := parseRevoke(it); ok {
				c.exec.Revoke(id, epoch)
			}
		}
	}
}

func parseRevoke(s string) (ExecutionID, int64, bool) {
	part, rest, ok1 := strings.Cut(s, ":")
	u, ep, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return ExecutionID{}, 0, false
	}
	p, err1 := strconv.ParseInt(part, 10, 16)
	id, err2 := uuid.Parse(u)
	epoch, err3 := strconv.ParseInt(ep, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return ExecutionID{}, 0, false
	}
	return ExecutionID{Partition: int16(p), UUID: id}, epoch, true
}

// jitter spreads d by ±10% so that many workers do not poll in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}
