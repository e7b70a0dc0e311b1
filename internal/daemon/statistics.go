package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/store"
)

// Which statistics are stale enough to refresh: a table with at least
// staleMinRows live rows that its statistics put below 1/staleFactor of
// them. A table that fills from empty is analyzed a few times on the way
// (at each fourfold growth); then autovacuum's own analyses keep up.
const (
	staleMinRows = 1000
	staleFactor  = 4
)

// statistician refreshes, every StatisticsInterval, the planner
// statistics of ff_ tables analyzed while nearly empty that have filled
// since, of ff_execution analyzed while few of its rows were live that
// the lane statistics now count many, and of ff_execution and ff_key
// whose statistics are missing or take them for nearly empty, read at
// once (store.RefreshStaleStatistics). Autovacuum would, but up to
// autovacuum_naptime later, and until then the planner plans every batch
// as if the table were empty.
type statistician struct {
	runner
	e       *env
	failing bool // the last check failed: report the next failure at Debug
}

// Start checks at once (tables may have filled while no daemon ran), then
// every StatisticsInterval.
func (s *statistician) Start(ctx context.Context) error {
	return s.start(ctx, every(s.e.cfg.StatisticsInterval, true, func(context.Context) { s.check(s.e.work) }))
}

// check refreshes the stale tables' statistics, if any.
func (s *statistician) check(ctx context.Context) {
	start := time.Now()
	refreshed, err := store.RefreshStaleStatistics(ctx, s.e.cfg.Pool, staleMinRows, staleFactor)
	if err != nil {
		level := zap.WarnLevel
		if s.failing {
			level = zap.DebugLevel
		}
		s.failing = true
		s.e.log.Log(level, "refresh planner statistics; autovacuum will, later", zap.Error(err))
		return
	}
	s.failing = false
	for _, t := range refreshed {
		s.e.m.statsRefreshed.Inc()
		s.e.log.Info("planner statistics refreshed", zap.String("table", t.Name),
			zap.Int64("estimated_rows", t.Estimated), zap.Int64("live_rows", t.Live), zap.Duration("duration", time.Since(start)))
	}
}
