package daemon

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// watchdog pings the database; it keeps the readiness flag in step with
// the answers and pings systemd's watchdog only while the database
// answers.
type watchdog struct {
	runner
	e        *env
	interval time.Duration // systemd's watchdog interval; 0: none
	dbOK     atomic.Bool
}

// Start pings every 5 s, or twice per systemd watchdog interval when
// that is shorter.
func (w *watchdog) Start(ctx context.Context) error {
	w.interval = w.e.cfg.Supervisor.WatchdogInterval()
	period := 5 * time.Second
	if w.interval > 0 {
		period = min(period, w.interval/2)
	}
	return w.start(ctx, every(period, false, func(ctx context.Context) { w.check(ctx, period) }))
}

// check pings the database once, waiting at most timeout.
func (w *watchdog) check(ctx context.Context, timeout time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	err := w.e.cfg.Pool.Ping(pctx)
	cancel()
	if w.dbOK.Swap(err == nil) != (err == nil) {
		if err != nil {
			w.e.log.Warn("database not answering; not ready", zap.Error(err))
		} else {
			w.e.log.Info("database answering again")
		}
	}
	if err == nil && w.interval > 0 {
		w.e.cfg.Supervisor.Notify("WATCHDOG=1")
	}
}

// sampler refreshes the gauges read from the database every
// SampleInterval: each lane's live executions and lag, each named
// consumer's lag, each replication slot's retained WAL. The lanes are
// counted by one daemon per interval (store.SampleLaneStats: the daemon
// whose turn it is writes ff_lane_stats), and every daemon reads the
// rows; counting only the live states' partial indexes.
type sampler struct {
	runner
	e *env
}

// Start samples at once and then every SampleInterval.
func (s *sampler) Start(ctx context.Context) error {
	return s.start(ctx, every(s.e.cfg.SampleInterval, true, func(context.Context) { s.sample(s.e.work) }))
}

func (s *sampler) sample(ctx context.Context) {
	s.lanes(ctx)
	// Consumers and slots: what dashboards show as consumer lag.
	if cs, err := store.ConsumerLags(ctx, s.e.cfg.Pool); err != nil {
		s.e.log.Debug("sample consumer lags", zap.Error(err))
	} else {
		s.e.m.consumerBehind.Reset()
		s.e.m.consumerLag.Reset()
		for _, c := range cs {
			s.e.m.consumerBehind.WithLabelValues(c.Name).Set(float64(c.Behind))
			lag := 0.0
			if c.LagSeconds != nil {
				lag = *c.LagSeconds
			}
			s.e.m.consumerLag.WithLabelValues(c.Name).Set(lag)
		}
	}
	if slots, err := store.Slots(ctx, s.e.cfg.Pool); err != nil {
		s.e.log.Debug("sample replication slots", zap.Error(err))
	} else {
		s.e.m.slotRetained.Reset()
		for _, sl := range slots {
			s.e.m.slotRetained.WithLabelValues(sl.Name).Set(float64(sl.RetainedBytes))
		}
	}
}

// lanes samples the lane statistics when it is this daemon's turn (the
// last sample is older than most of an interval and no other daemon is
// taking one), then sets the lane gauges from what is stored.
func (s *sampler) lanes(ctx context.Context) {
	// A sample a little younger than the interval still counts as fresh,
	// so that daemons whose timers drift do not each sample in turn.
	every := s.e.cfg.SampleInterval * 9 / 10
	if _, err := store.SampleLaneStats(ctx, s.e.cfg.Pool, every, samplerName()); err != nil {
		s.e.log.Debug("sample lane statistics", zap.Error(err))
	}
	stats, at, err := store.LaneStats(ctx, s.e.cfg.Pool)
	if err != nil {
		s.e.log.Debug("read lane statistics", zap.Error(err))
		return
	}
	s.e.m.executions.Reset()
	s.e.m.laneDue.Reset()
	s.e.m.laneLag.Reset()
	for _, l := range stats {
		s.e.m.executions.WithLabelValues(l.Lane, string(ffdtype.StatePending)).Set(float64(l.Pending + l.Delayed))
		s.e.m.executions.WithLabelValues(l.Lane, string(ffdtype.StateRunning)).Set(float64(l.Running))
		s.e.m.executions.WithLabelValues(l.Lane, string(ffdtype.StateBlocked)).Set(float64(l.Blocked))
		s.e.m.laneDue.WithLabelValues(l.Lane).Set(float64(l.Pending))
		s.e.m.laneLag.WithLabelValues(l.Lane).Set(l.Lag().Seconds())
	}
	if !at.IsZero() {
		s.e.m.laneStatsAge.Set(max(time.Since(at), 0).Seconds())
	}
}

// samplerName names this daemon in the lane statistics it samples: its
// host and process.
func samplerName() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "daemon"
	}
	return host + "/" + strconv.Itoa(os.Getpid())
}
