package daemon

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/store"
)

// watchdog pings the database; it keeps the readiness flag in step with
// the answers and pings systemd's watchdog only while the database
// answers.
type watchdog struct {
	runner
	e    *env
	dbOK atomic.Bool
}

// Start runs the watchdog.
func (w *watchdog) Start(ctx context.Context) { w.start(ctx, w.loop) }

// Stop ends it.
func (w *watchdog) Stop() { w.stop() }

func (w *watchdog) loop(ctx context.Context) {
	interval := w.e.cfg.Notifier.WatchdogInterval()
	check := 5 * time.Second
	if interval > 0 {
		check = min(check, interval/2)
	}
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, check)
		err := w.e.cfg.Pool.Ping(pctx)
		cancel()
		if w.dbOK.Swap(err == nil) != (err == nil) {
			if err != nil {
				w.e.log.Warn("database not answering; not ready", zap.Error(err))
			} else {
				w.e.log.Info("database answering again")
			}
		}
		if err == nil && interval > 0 {
			w.e.cfg.Notifier.Notify("WATCHDOG=1")
		}
	}
}

// sampler refreshes the executions gauge every SampleInterval (live
// states only: counting terminal rows would scan the table).
type sampler struct {
	runner
	e *env
}

// Start runs the sampler; it samples at once.
func (s *sampler) Start(ctx context.Context) { s.start(ctx, s.loop) }

// Stop ends it.
func (s *sampler) Stop() { s.stop() }

func (s *sampler) loop(ctx context.Context) {
	t := time.NewTicker(s.e.cfg.SampleInterval)
	defer t.Stop()
	for {
		s.sample(s.e.work)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (s *sampler) sample(ctx context.Context) {
	depths, err := store.LiveByLane(ctx, s.e.cfg.Pool)
	if err != nil {
		s.e.log.Debug("sample executions", zap.Error(err))
		return
	}
	s.e.m.executions.Reset()
	for _, l := range depths {
		s.e.m.executions.WithLabelValues(l.Lane, string(l.State)).Set(float64(l.Count))
	}
}
