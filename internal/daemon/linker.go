package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// linkBatch bounds the steps and flows one pass of the linker reads of
// each kind; a full batch is followed by another pass at once.
const linkBatch = 100

// linkGap is the least time between two passes: completions come by the
// thousand a second on a busy database, and one pass serves all those
// that came during the last.
const linkGap = 50 * time.Millisecond

// Actions of ffd_links_total.
const (
	linkStarted     = "subflow_started"
	linkEnded       = "subflow_ended"
	linkCompensated = "compensation_started"
)

// linker links flows to the flows they start (docs/workflows.md): it
// starts the child of each sub-flow step that may run, ends each step
// as its child ended (or cancels the child of a step that ended first),
// and submits the compensation flow of each armed flow that failed or
// was cancelled. It acts on the nudge a sub-flow step's readiness sends
// (ChannelEvent), on every completion notification while any sub-flow
// or armed flow is in progress, and every ScheduleInterval (every fourth
// on a distributed Postgres, where a pass reads every shard:
// fallbackEvery). Every
// daemon runs one; each change locks what it changes and re-checks it,
// so two daemons never do one twice.
type linker struct {
	runner
	e *env
}

// Start passes at once, then on each nudge and at its fallback period.
func (l *linker) Start(ctx context.Context) error {
	return l.start(ctx, func(ctx context.Context) {
		tick := time.NewTicker(fallbackEvery(ctx, l.e, l.e.cfg.ScheduleInterval))
		defer tick.Stop()
		for {
			watching := l.pass(l.e.work)
			select {
			case <-ctx.Done():
				return
			case <-time.After(linkGap):
			}
			if !l.wait(ctx, tick.C, watching) {
				return
			}
		}
	})
}

// wait blocks until the next pass is due: a tick, a sub-flow nudge, or,
// while watching, a completion. While nothing is in progress it does not
// even wake for completions (a nil channel is never ready), so a busy
// database's notifications cost it nothing. It is false once ctx is
// done.
func (l *linker) wait(ctx context.Context, tick <-chan time.Time, watching bool) bool {
	var ends <-chan struct{}
	if watching {
		ends = l.e.fanout.Ends()
	}
	select {
	case <-ctx.Done():
		return false
	case <-tick:
	case <-l.e.fanout.Subflows():
	case <-ends:
	}
	return true
}

// pass does what is due, batch after batch while batches come full, and
// says whether anything is in progress to watch completions for.
func (l *linker) pass(ctx context.Context) bool {
	busy, err := store.LinksInProgress(ctx, l.e.cfg.Pool)
	if err != nil {
		l.e.log.Warn("look for sub-flows and compensations; retrying next tick", zap.Error(err))
		return true
	}
	if !busy {
		return false
	}
	for ctx.Err() == nil {
		n := l.startSubflows(ctx) + l.endSubflows(ctx) + l.compensate(ctx)
		if n < linkBatch {
			break
		}
	}
	return true
}

func (l *linker) startSubflows(ctx context.Context) int {
	steps, err := store.SubflowsDue(ctx, l.e.cfg.Pool, linkBatch)
	if err != nil {
		l.e.log.Warn("find sub-flow steps to start; retrying next tick", zap.Error(err))
		return 0
	}
	n := 0
	for _, step := range steps {
		child, err := flows.StartSubflow(ctx, l.e.cfg.Pool, leases.Limits{}, step)
		if err != nil {
			l.e.log.Error("start sub-flow step", zap.Stringer("execution_id", step), zap.Error(err))
			continue
		}
		if child != nil {
			n++
			l.e.m.linked.WithLabelValues(linkStarted).Inc()
			l.e.log.Info("sub-flow started", zap.Stringer("execution_id", step), zap.Stringer("flow_id", child))
		}
	}
	return n
}

func (l *linker) endSubflows(ctx context.Context) int {
	ends, err := store.SubflowsEnded(ctx, l.e.cfg.Pool, linkBatch)
	if err != nil {
		l.e.log.Warn("find ended sub-flows; retrying next tick", zap.Error(err))
		return 0
	}
	n := 0
	for _, e := range ends {
		acted, err := flows.EndSubflow(ctx, l.e.cfg.Pool, leases.Limits{}, e)
		if err != nil {
			l.e.log.Error("end sub-flow", zap.Stringer("execution_id", e.Step), zap.Stringer("flow_id", e.Child), zap.Error(err))
			continue
		}
		if !acted {
			continue
		}
		n++
		l.e.m.linked.WithLabelValues(linkEnded).Inc()
		l.e.log.Info("sub-flow ended", zap.Stringer("execution_id", e.Step), zap.Stringer("flow_id", e.Child),
			zap.String("step_state", string(e.StepState)), zap.String("flow_state", string(e.ChildState)))
	}
	return n
}

func (l *linker) compensate(ctx context.Context) int {
	ids, err := store.CompensationsDue(ctx, l.e.cfg.Pool, linkBatch)
	if err != nil {
		l.e.log.Warn("find flows to compensate; retrying next tick", zap.Error(err))
		return 0
	}
	n := 0
	for _, id := range ids {
		cf, err := flows.Compensate(ctx, l.e.cfg.Pool, leases.Limits{}, id)
		if err != nil {
			l.e.log.Error("compensate flow", zap.Stringer("flow_id", id), zap.Error(err))
			continue
		}
		if cf != nil {
			n++
			l.e.m.linked.WithLabelValues(linkCompensated).Inc()
			l.e.log.Info("compensation started", zap.Stringer("flow_id", id), zap.Stringer("compensation_flow_id", cf))
		}
	}
	return n
}
