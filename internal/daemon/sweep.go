package daemon

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// sweeper finds everything notifications should have delivered, every
// SweepInterval (jittered) and at once when asked (after a reconnect, or
// when a notification was too wide to expand).
//
// It keeps count of each step's failures in a row: a step that has failed
// sweepFailLimit sweeps running is failing, and the daemon is not ready
// while any is (a database that answers pings but refuses the daemon's
// statements, a primary demoted to a read-only replica, a schema the
// daemon cannot run on, must not look healthy).
type sweeper struct {
	runner
	e  *env
	mu sync.Mutex // one sweep at a time

	// failures counts each step's failures in a row; guarded by mu.
	failures map[string]int
	// failing lists the failing steps, for Ready and /readyz.
	failing atomic.Pointer[[]string]

	// spread says the tables are distributed, where each step that reads
	// every shard runs in its turn (sweepTurns), once known (read at the
	// first sweep that can); turn counts the sweeps. Guarded by mu.
	spread, known bool
	turn          int
}

// sweepTurns is how many sweeps a pass over every step takes on a
// distributed Postgres, and stepTurn the sweep of the pass each step runs
// in (-1: every sweep). A step there reads every shard (a task per shard
// on the coordinator or front door, 20 to 140 ms each on a small
// cluster); run together every second they took about 300 ms of the
// node's time per second. Spread over a pass, each runs every sweepTurns × SweepInterval,
// which is how late they find what a lost notification left (the timer
// worker still acts on the leases and deadlines it knows at their time).
// A full sweep (after a reconnect) runs every step.
const sweepTurns = 4

// fallbackEvery is the period of a pass that finds what lost
// notifications left, base on one Postgres. On a distributed Postgres,
// where the pass reads every shard, it is once per sweep pass
// (sweepTurns × base), as the sweep's own steps: the timers' reload,
// the event triggers' and the linker's. Their notifications still wake
// them at once.
func fallbackEvery(ctx context.Context, e *env, base time.Duration) time.Duration {
	if dist, err := store.Distributed(ctx, e.cfg.Pool); err == nil && dist {
		return base * sweepTurns
	}
	return base
}

// sweepRuns says whether step runs in the sweep numbered turn: every
// sweep on one Postgres, and after a reconnect (full); on a distributed
// Postgres (spread) in its turn of the pass.
func sweepRuns(step string, turn int, spread, full bool) bool {
	t := stepTurn[step]
	return full || !spread || t < 0 || turn%sweepTurns == t
}

var stepTurn = map[string]int{
	stepDispatch:       0,
	stepCancelSiblings: 1,
	stepSignals:        1,
	stepLapsedLeases:   2,
	stepDeadlines:      2,
	stepDueLanes:       3,
	// ff_key is one shard, a read of one task; but when it holds keys
	// that look idle, the step reads their lanes' live executions on
	// every shard to confirm (59 ms a sweep on one worker node while a
	// few keys stayed live).
	stepIdleKeys: 3,
}

// Sweep steps, as logs and ffd_sweep_errors_total name them.
const (
	stepDispatch       = "dispatch"
	stepCancelSiblings = "cancel_siblings"
	stepLapsedLeases   = "lapsed_leases"
	stepDeadlines      = "deadlines"
	stepDueLanes       = "due_lanes"
	stepSignals        = "signals"
	stepIdleKeys       = "idle_keys"
)

var sweepSteps = []string{stepDispatch, stepCancelSiblings, stepLapsedLeases, stepDeadlines, stepDueLanes, stepSignals, stepIdleKeys}

// sweepFailLimit is how many sweeps in a row a step may fail before it
// is failing: one failure is a blip (a restart, a lock timeout), three
// are a state.
const sweepFailLimit = 3

// Failing lists the sweep steps that have failed sweepFailLimit sweeps in
// a row; empty when all is well.
func (s *sweeper) Failing() []string {
	if f := s.failing.Load(); f != nil {
		return *f
	}
	return nil
}

// Start runs the sweep loop.
func (s *sweeper) Start(ctx context.Context) error { return s.start(ctx, s.loop) }

func (s *sweeper) loop(ctx context.Context) {
	for {
		wait := time.Duration(float64(s.e.cfg.SweepInterval) * (0.9 + 0.2*rand.Float64()))
		timer := time.NewTimer(wait)
		full := false
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case full = <-s.e.fanout.SweepNow():
			timer.Stop()
		}
		s.sweep(s.e.work, full)
	}
}

// sweep runs one sweep: undispatched events, pending cancel groups, lapsed
// leases and attempt timeouts, passed deadlines and due delays. full
// (after a (re)connect) ignores the dispatch grace, since the
// notifications of that window are lost.
func (s *sweeper) sweep(ctx context.Context, full bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	grace := s.e.cfg.DispatchGrace
	if full {
		grace = 0
	}
	if !s.known {
		dist, err := store.Distributed(ctx, s.e.cfg.Pool)
		s.spread, s.known = dist, err == nil
	}
	turn := s.turn
	s.turn++
	runs := func(step string) bool { return sweepRuns(step, turn, s.spread, full) }
	errs := map[string]error{}
	if runs(stepDispatch) {
		errs[stepDispatch] = s.dispatch(ctx, grace)
	}
	if runs(stepCancelSiblings) {
		errs[stepCancelSiblings] = s.cancelSiblings(ctx)
	}
	if runs(stepLapsedLeases) {
		errs[stepLapsedLeases], errs[stepDeadlines] = s.expire(ctx)
	}
	if runs(stepDueLanes) {
		errs[stepDueLanes] = s.e.due.notify(ctx)
	}
	if runs(stepSignals) {
		errs[stepSignals] = s.matchSignals(ctx)
	}
	errs[stepIdleKeys] = s.forgetIdleKeys(ctx)
	if ctx.Err() == nil { // a stop is not a failure
		s.record(errs)
	}
}

// record counts each step's failures in a row and says when a step starts
// or stops failing.
func (s *sweeper) record(errs map[string]error) {
	if s.failures == nil {
		s.failures = map[string]int{}
	}
	var failing []string
	for _, step := range sweepSteps {
		err, ran := errs[step]
		if !ran {
			if s.failures[step] >= sweepFailLimit {
				failing = append(failing, step) // failing until it runs and succeeds
			}
			continue
		}
		was := s.failures[step] >= sweepFailLimit
		if err == nil {
			if was {
				s.e.log.Info("sweep step succeeds again", zap.String("step", step))
			}
			s.failures[step] = 0
			continue
		}
		s.e.m.sweepErrors.WithLabelValues(step).Inc()
		s.failures[step]++
		if s.failures[step] >= sweepFailLimit {
			failing = append(failing, step)
			if !was {
				s.e.log.Error("sweep step failing; the daemon is not ready until it succeeds",
					zap.String("step", step), zap.Int("sweeps_in_a_row", s.failures[step]), zap.Error(err))
			}
		}
	}
	s.e.m.sweepFailing.Set(float64(len(failing)))
	s.failing.Store(&failing)
}

func (s *sweeper) dispatch(ctx context.Context, grace time.Duration) error {
	for range 100 { // bounded: a huge backlog is worked over several sweeps
		res, err := s.e.cascade.DispatchBatch(ctx, s.e.cfg.SweepBatch, grace)
		var held *cascade.HeldError
		if errors.As(err, &held) {
			s.e.log.Warn("sweep: completion events wait for flows another transaction holds",
				zap.Int("events", held.Events), zap.Int("flows", held.Flows))
			if res.Events > 0 {
				s.e.m.sweepFound.WithLabelValues("completion_event").Add(float64(res.Events))
			}
			return nil // the held ones come first in every batch: try again next sweep
		}
		if err != nil {
			s.e.log.Error("sweep: dispatch failed", zap.Error(err))
			return err
		}
		if res.Events > 0 {
			s.e.m.sweepFound.WithLabelValues("completion_event").Add(float64(res.Events))
			s.e.log.Debug("sweep dispatched events", zap.Int("events", res.Events))
		}
		if res.Events < s.e.cfg.SweepBatch {
			return nil
		}
	}
	return nil
}

func (s *sweeper) cancelSiblings(ctx context.Context) error {
	groups, n, err := s.e.cascade.CancelSiblings(ctx, s.e.cfg.SweepBatch)
	var held *cascade.HeldError
	if errors.As(err, &held) {
		s.e.log.Warn("sweep: sibling-cancel groups wait for siblings another transaction holds", zap.Int("groups", held.Flows))
		err = nil
	}
	if err != nil {
		s.e.log.Error("sweep: sibling cancellation failed", zap.Error(err))
	} else if groups > 0 {
		s.e.m.sweepFound.WithLabelValues("cancel_group").Add(float64(groups))
		s.e.log.Info("sweep cancelled siblings", zap.Int("groups", groups), zap.Int("cancelled", n))
	}
	return err
}

func (s *sweeper) expire(ctx context.Context) (lapsedErr, deadlineErr error) {
	exp, err := leases.SweepLapsed(ctx, s.e.cfg.Pool, s.e.cfg.SweepBatch)
	lapsedErr = err
	if err != nil {
		s.e.log.Error("sweep: lease expiry failed", zap.Error(err))
	} else if exp.Retried+exp.Terminated > 0 {
		s.e.m.sweepFound.WithLabelValues("lapsed_lease").Add(float64(exp.Retried + exp.Terminated))
		s.e.m.recordExpired(exp)
		s.e.log.Info("sweep expired leases", zap.Int("retried", exp.Retried), zap.Int("expired", exp.Terminated))
	}
	dl, err := leases.SweepDeadlines(ctx, s.e.cfg.Pool, s.e.cfg.SweepBatch)
	deadlineErr = err
	if err != nil {
		s.e.log.Error("sweep: deadline expiry failed", zap.Error(err))
	} else if dl > 0 {
		s.e.m.sweepFound.WithLabelValues("deadline").Add(float64(dl))
		s.e.m.deadlinesExpired.Add(float64(dl))
		s.e.log.Info("sweep expired deadlines", zap.Int("expired", dl))
	}
	return lapsedErr, deadlineErr
}

// matchSignals ends the waits that a signal already sent should have
// ended (store.MatchSignals says how one can be left).
func (s *sweeper) matchSignals(ctx context.Context) error {
	n, err := store.MatchSignals(ctx, s.e.cfg.Pool, s.e.cfg.SweepBatch)
	if n > 0 {
		s.e.m.sweepFound.WithLabelValues("signal").Add(float64(n))
		s.e.log.Warn("sweep ended waits that missed the signal sent for them", zap.Int("woken", n))
	}
	if err != nil {
		s.e.log.Error("sweep: matching signals to waits failed", zap.Error(err))
	}
	return err
}

// forgetIdleKeys deletes concurrency keys that only their executions
// named and that have none live left, so that the claims' turn order
// walks keys with work (store.ForgetIdleKeys).
func (s *sweeper) forgetIdleKeys(ctx context.Context) error {
	n, err := store.ForgetIdleKeys(ctx, s.e.cfg.Pool, s.e.cfg.SweepBatch)
	if n > 0 {
		s.e.log.Debug("sweep forgot idle concurrency keys", zap.Int("keys", n))
	}
	if err != nil {
		s.e.log.Error("sweep: forgetting idle concurrency keys failed", zap.Error(err))
	}
	return err
}

// dueLanes sends ff_ready for lanes whose delayed executions came due
// since its watermark. The sweeper and the timeout worker both call it;
// it owns its watermark and serializes them.
type dueLanes struct {
	e     *env
	mu    sync.Mutex
	since time.Time
}

// notify sends ff_ready for the lanes that came due, and moves the
// watermark on when it succeeded.
func (d *dueLanes) notify(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	lanes, next, err := store.NotifyDueLanes(ctx, d.e.cfg.Pool, d.since)
	if err != nil {
		d.e.log.Warn("due lanes: notify failed; the next sweep retries", zap.Error(err))
		return err
	}
	d.since = next
	if len(lanes) > 0 {
		d.e.m.readyNotified.Add(float64(len(lanes)))
		d.e.log.Debug("sent ff_ready for due lanes", zap.Strings("lanes", lanes))
	}
	return nil
}
