package daemon

import (
	"context"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/store"
)

// retainer deletes outbox events, finished executions and finished flows
// past their retention, and reports idle consumers, every
// RetentionInterval.
type retainer struct {
	runner
	e *env
}

// Start runs retention every RetentionInterval.
func (r *retainer) Start(ctx context.Context) error {
	return r.start(ctx, every(r.e.cfg.RetentionInterval, false, func(context.Context) { r.retain(r.e.work) }))
}

func (r *retainer) retain(ctx context.Context) {
	cfg, log, m := r.e.cfg, r.e.log, r.e.m
	if cfg.Retention > 0 {
		res, err := outbox.Retain(ctx, cfg.Pool, cfg.Retention, outbox.DefaultRetentionBatch)
		if err != nil {
			log.Error("retention failed", zap.Error(err))
		} else if res.Completion+res.Lease > 0 {
			m.outboxDeleted.WithLabelValues("completion").Add(float64(res.Completion))
			m.outboxDeleted.WithLabelValues("lease").Add(float64(res.Lease))
			log.Info("retention deleted outbox events", zap.Int("completion", res.Completion), zap.Int("lease", res.Lease), zap.Duration("retention", cfg.Retention))
		}
	}
	r.retainFinished(ctx)
	r.forgetClosedDebounces(ctx)
	r.deleteFiredEvents(ctx)
	idle, err := store.IdleConsumers(ctx, cfg.Pool, cfg.ConsumerIdleLimit)
	if err != nil {
		log.Warn("read idle consumers", zap.Error(err))
		return
	}
	m.idleConsumers.Set(float64(len(idle)))
	for _, c := range idle {
		log.Warn("outbox consumer idle while events wait; it holds retention back (drop it with ffd events drop-consumer if it is gone)",
			zap.String("consumer", c.Name), zap.String("stream", string(c.Stream)), zap.Duration("idle", c.Idle))
	}
}

// maxFinishedBatches bounds one pass; the next pass goes on where it
// stopped.
const maxFinishedBatches = 100

// retainFinished deletes finished solo executions, then finished flows,
// past their namespace's age, in batches of DefaultRetentionBatch rows
// that skip rows other transactions hold.
func (r *retainer) retainFinished(ctx context.Context) {
	cfg, log, m := r.e.cfg, r.e.log, r.e.m
	ages := store.Ages{Default: cfg.ExecutionRetention, ByNamespace: cfg.NamespaceRetention, Dead: cfg.DeadLetterRetention}
	for _, t := range []struct {
		kind   string
		delete func(context.Context, store.DB, store.Ages, int) (int, error)
	}{
		{"execution", store.DeleteFinishedExecutions},
		{"flow", store.DeleteFinishedFlows},
	} {
		total := 0
		for range maxFinishedBatches {
			n, err := t.delete(ctx, cfg.Pool, ages, DefaultRetentionBatch)
			if err != nil {
				log.Error("retention of finished work failed", zap.String("kind", t.kind), zap.Error(err))
				break
			}
			total += n
			if n < DefaultRetentionBatch {
				break
			}
		}
		if total > 0 {
			m.retentionDeleted.WithLabelValues(t.kind).Add(float64(total))
			log.Info("retention deleted finished work", zap.String("kind", t.kind), zap.Int("deleted", total))
		}
	}
}

// forgetClosedDebounces deletes the debounce windows that are over, with
// whatever execution retention is set: a window's row is small, but one
// is left per key ever debounced.
func (r *retainer) forgetClosedDebounces(ctx context.Context) {
	n, err := store.DeleteClosedDebounces(ctx, r.e.cfg.Pool)
	if err != nil {
		r.e.log.Error("forget closed debounce windows", zap.Error(err))
		return
	}
	if n > 0 {
		r.e.log.Debug("forgot closed debounce windows", zap.Int("deleted", n))
	}
}

// deleteFiredEvents deletes events fired longer ago than the execution
// retention: what they started is kept (or deleted) on its own terms.
func (r *retainer) deleteFiredEvents(ctx context.Context) {
	n, err := store.DeleteFiredEvents(ctx, r.e.cfg.Pool, r.e.cfg.ExecutionRetention)
	if err != nil {
		r.e.log.Error("delete fired events", zap.Error(err))
		return
	}
	if n > 0 {
		r.e.m.retentionDeleted.WithLabelValues("event").Add(float64(n))
		r.e.log.Info("retention deleted fired events", zap.Int("deleted", n))
	}
}
