package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/trigger"
)

// eventBatch bounds the events one pass fires (and one transaction, on
// one Postgres; on a distributed one each event commits alone, and
// CascadeWorkers partitions fire at once).
const eventBatch = 100

// triggerer fires published events as their notifications (ff_event)
// come, and every ScheduleInterval (on a distributed Postgres, whose
// pass reads every shard, every fourth: fallbackEvery) for any a lost
// notification left: each starts what its triggers ask for. Every daemon
// runs one; events are taken with SKIP LOCKED, so each fires once.
type triggerer struct {
	runner
	e *env
}

// Start fires at once, then on each nudge and at its fallback period.
func (t *triggerer) Start(ctx context.Context) error {
	return t.start(ctx, func(ctx context.Context) {
		tick := time.NewTicker(fallbackEvery(ctx, t.e, t.e.cfg.ScheduleInterval))
		defer tick.Stop()
		for {
			t.fire(t.e.work)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			case <-t.e.fanout.Events():
			}
		}
	})
}

func (t *triggerer) fire(ctx context.Context) {
	for {
		res, err := trigger.Fire(ctx, t.e.cfg.Pool, leases.Limits{}, eventBatch, t.e.cfg.CascadeWorkers, t.e.log)
		if err != nil {
			t.e.log.Warn("fire events; retrying next tick", zap.Error(err))
			return
		}
		if res.Events > 0 {
			t.e.m.eventsFired.Add(float64(res.Events))
			t.e.log.Debug("events fired", zap.Int("events", res.Events), zap.Int("started", res.Started))
		}
		if res.Events < eventBatch {
			return
		}
	}
}
