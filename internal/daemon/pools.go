package daemon

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/logging"
)

// maxDispatchBatch bounds the events one cascade transaction takes.
const maxDispatchBatch = 200

// cascadePool dispatches the completion events of the partitions
// notifications name: each of its workers takes the partitions marked
// since the last take, and up to maxDispatchBatch of their events, into
// one transaction (one commit carries many hops). A take that fills its
// batch marks its partitions again at once, so that another worker takes
// the rest while it works (SKIP LOCKED keeps their events apart).
type cascadePool struct {
	runner
	e *env
}

// Start launches Config.CascadeWorkers workers.
func (p *cascadePool) Start(ctx context.Context) error {
	return p.start(ctx, times(p.e.cfg.CascadeWorkers, p.work)...)
}

func (p *cascadePool) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.e.fanout.Dispatch():
		}
		parts := p.e.fanout.TakePartitions(0)
		if len(parts) == 0 {
			continue
		}
		p.dispatch(parts)
	}
}

// dispatch dispatches events of parts.
func (p *cascadePool) dispatch(parts []int16) {
	log := p.e.log
	res, err := p.e.cascade.DispatchPartitions(p.e.work, parts, maxDispatchBatch, func() { p.e.fanout.MarkPartitions(parts) })
	var held *cascade.HeldError
	switch {
	case errors.As(err, &held):
		// Degraded, not failed: the rest of the batch went on.
		log.Warn("completion events wait for flows another transaction holds; the sweep will retry them",
			zap.Int("events", held.Events), zap.Int("flows", held.Flows))
	case err != nil:
		log.Error("dispatch failed; the sweep will retry", zap.Int("partitions", len(parts)), zap.Error(err))
		return
	}
	p.e.m.took(res.Events > 0)
	if res.Events > 0 {
		log.Debug("events dispatched", zap.Int("events", res.Events), zap.Int("edges", res.EdgesResolved), zap.Int("decided", len(res.Decided)))
	}
	for _, dec := range res.Decided {
		// Routine (a line per hop): Debug, and nothing built unless on.
		// hop_latency: from the oldest upstream completion event of the
		// batch to the decision, by the database clock.
		ce := log.Check(zap.DebugLevel, "edge group decided")
		if ce == nil {
			break
		}
		ce.Write(zap.String(logging.FieldFlowID, dec.FlowID.String()), zap.String(logging.FieldExecutionID, dec.Downstream.String()),
			zap.String("decision", string(dec.Decision)), zap.String("policy", string(dec.Policy.Kind)),
			zap.Duration("hop_latency", res.Age))
	}
	if res.CancelGroups > 0 {
		p.e.fanout.CancelSiblings()
	}
}

// siblingPool cancels the live siblings of satisfied cancel_remaining
// groups when the cascade queues some.
type siblingPool struct {
	runner
	e *env
}

// Start launches Config.SiblingWorkers workers.
func (p *siblingPool) Start(ctx context.Context) error {
	return p.start(ctx, times(p.e.cfg.SiblingWorkers, p.work)...)
}

func (p *siblingPool) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.e.fanout.Siblings():
		}
		groups, n, err := p.e.cascade.CancelSiblings(p.e.work, p.e.cfg.SweepBatch)
		var held *cascade.HeldError
		switch {
		case errors.As(err, &held):
			p.e.log.Warn("sibling-cancel groups wait for siblings another transaction holds; the sweep will retry them",
				zap.Int("groups", held.Flows))
		case err != nil:
			p.e.log.Error("sibling cancellation failed; the sweep will retry", zap.Error(err))
			continue
		}
		if n > 0 {
			p.e.log.Info("siblings cancelled", zap.Int("groups", groups), zap.Int("cancelled", n))
		}
	}
}
