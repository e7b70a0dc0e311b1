package ffd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/store"
)

// DefaultStallWarning is how long a completion event may wait for a
// daemon before clients and workers warn (Config.StallWarning).
const DefaultStallWarning = time.Minute

// DispatchLag is how long the oldest completion event not yet dispatched
// by a daemon has waited; 0 when none waits. A lag that keeps growing
// means no daemon is running (or it is far behind): flows stall after
// their first steps. It reads one index entry, whatever the backlog.
func (c *Client) DispatchLag(ctx context.Context) (time.Duration, error) {
	return store.DispatchLag(ctx, c.pool)
}

// stallWatch warns when completion events wait too long for a daemon:
// the one silent failure of a deployment without one. A client checks
// after submitting a flow, at most once per threshold; its workers check
// every half threshold while they run.
type stallWatch struct {
	threshold time.Duration // <= 0: never check
	log       *zap.Logger
	lag       prometheus.Gauge // nil without Config.Metrics

	mu      sync.Mutex
	next    time.Time // the client's next check
	stalled bool
}

func newStallWatch(threshold time.Duration, log *zap.Logger, reg prometheus.Registerer) (*stallWatch, error) {
	s := &stallWatch{threshold: threshold, log: log}
	if reg == nil {
		return s, nil
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "ffd_dispatch_lag_seconds",
		Help: "How long the oldest undispatched completion event had waited for a daemon, as last checked by this client or its workers.",
	})
	if err := reg.Register(g); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		g = are.ExistingCollector.(prometheus.Gauge) // several clients, one registry
	}
	s.lag = g
	return s, nil
}

// due reports whether the client's rate-limited check should run now.
func (s *stallWatch) due(now time.Time) bool {
	if s.threshold <= 0 {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Before(s.next) {
		return false
	}
	s.next = now.Add(s.threshold)
	return true
}

// check reads the lag and warns on the way into a stall (and says when it
// is over); a failed read is left to the caller's next check.
func (s *stallWatch) check(ctx context.Context, c *Client) {
	lag, err := c.DispatchLag(ctx)
	if err != nil {
		s.log.Debug("read the dispatch lag", zap.Error(err))
		return
	}
	if s.lag != nil {
		s.lag.Set(lag.Seconds())
	}
	stalled := lag >= s.threshold
	s.mu.Lock()
	was := s.stalled
	s.stalled = stalled
	s.mu.Unlock()
	switch {
	case stalled:
		// Every check while stalled, not only the first: a stall that
		// lasts is worth repeating in the logs.
		s.log.Warn("completion events are waiting for a daemon: flows will not advance until one runs (ffd run, or ffd.NewDaemon in the application)",
			zap.Duration("oldest_wait", lag), zap.Duration("threshold", s.threshold))
	case was:
		s.log.Info("completion events are being dispatched again", zap.Duration("oldest_wait", lag))
	}
}

// watch checks every half threshold until ctx ends (a worker's loop).
func (s *stallWatch) watch(ctx context.Context, c *Client) {
	if s.threshold <= 0 {
		return
	}
	t := time.NewTicker(s.threshold / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.check(ctx, c)
		}
	}
}
