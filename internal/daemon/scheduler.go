package daemon

import (
	"context"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schedule"
)

// scheduleBatch bounds the schedules one transaction fires.
const scheduleBatch = 50

// scheduler fires due schedules every ScheduleInterval. Every daemon runs
// one; schedule rows are taken with SKIP LOCKED, so each tick fires once.
type scheduler struct {
	runner
	e *env
}

// Start fires at once and then every ScheduleInterval.
func (s *scheduler) Start(ctx context.Context) error {
	return s.start(ctx, every(s.e.cfg.ScheduleInterval, true, func(context.Context) { s.fire(s.e.work) }))
}

func (s *scheduler) fire(ctx context.Context) {
	for {
		res, err := schedule.Fire(ctx, s.e.cfg.Pool, leases.Limits{}, scheduleBatch, s.e.log)
		if err != nil {
			s.e.log.Warn("fire schedules; retrying next tick", zap.Error(err))
			return
		}
		if res.Ticks > 0 {
			s.e.m.scheduleTicks.Add(float64(res.Ticks))
			s.e.log.Debug("schedules fired", zap.Int("schedules", res.Schedules), zap.Int("ticks", res.Ticks))
		}
		if res.Schedules < scheduleBatch {
			return
		}
	}
}
