package ffdtest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// FlowRun is a flow as RunFlow left it.
type FlowRun struct {
	// Flow is the flow in its final state.
	Flow *ffd.Flow
	// Steps are its executions by step name.
	Steps map[string]*ffd.Execution
}

// State is a step's final state ("" for a step the flow does not have).
func (r *FlowRun) State(step string) ffd.State {
	if x := r.Steps[step]; x != nil {
		return x.State
	}
	return ""
}

// RunFlow runs a submitted flow to its end in this process, as production
// would but in miniature: an embedded daemon, and a worker configured by
// worker (its Handler or Kinds; its Lanes default to every lane the
// flow's steps use). Both stop before RunFlow returns. The test fails if
// the flow has not ended within DefaultTimeout.
//
// Durable steps run as in production (docs/workflows.md): a sleep ends
// when its time comes, a signal wait when the test sends the signal
// (db.Client.Signal, from another goroutine), and steps a handler
// spawns join the flow. Name their lanes in worker.Lanes when a spawn
// puts steps on a lane the flow did not use when RunFlow began.
func (db *DB) RunFlow(t testing.TB, flowID uuid.UUID, worker ffd.WorkerConfig) *FlowRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	if len(worker.Lanes) == 0 {
		worker.Lanes = db.lanes(ctx, t, flowID)
	}
	if worker.PollInterval == 0 {
		worker.PollInterval = 50 * time.Millisecond
	}
	d, err := ffd.NewDaemon(db.Pool, &ffd.DaemonConfig{Logger: zap.NewNop(), SweepInterval: 200 * time.Millisecond, StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("ffdtest: daemon: %v", err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatalf("ffdtest: start the daemon: %v", err)
	}
	defer d.Stop(context.Background())
	w, err := ffd.NewWorker(db.Client, worker)
	if err != nil {
		t.Fatalf("ffdtest: worker: %v", err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("ffdtest: start the worker: %v", err)
	}
	defer w.Stop(context.WithoutCancel(ctx))
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		f, err := db.Client.DescribeFlow(ctx, flowID)
		if err != nil {
			t.Fatalf("ffdtest: read flow %s: %v", flowID, err)
		}
		if f.State != ffd.FlowOpen {
			return &FlowRun{Flow: f, Steps: db.steps(ctx, t, flowID)}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("ffdtest: flow %s still open after %s: %s", flowID, DefaultTimeout, describe(members(ctx, t, db, flowID)))
		case <-tick.C:
		}
	}
}

// members reads every member of a flow.
func members(ctx context.Context, t testing.TB, db *DB, flowID uuid.UUID) []*ffd.Execution {
	t.Helper()
	var xs []*ffd.Execution
	p := ffd.ListParams{FlowID: &flowID, Limit: 1000}
	for {
		page, err := db.Client.List(ctx, p)
		if err != nil {
			t.Fatalf("ffdtest: list the members of flow %s: %v", flowID, err)
		}
		xs = append(xs, page.Executions...)
		if page.Next == nil {
			return xs
		}
		p.After = page.Next
	}
}

func (db *DB) lanes(ctx context.Context, t testing.TB, flowID uuid.UUID) []string {
	t.Helper()
	seen := map[string]bool{}
	var lanes []string
	for _, x := range members(ctx, t, db, flowID) {
		if !seen[x.Lane] {
			seen[x.Lane] = true
			lanes = append(lanes, x.Lane)
		}
	}
	return lanes
}

func (db *DB) steps(ctx context.Context, t testing.TB, flowID uuid.UUID) map[string]*ffd.Execution {
	t.Helper()
	out := map[string]*ffd.Execution{}
	for _, x := range members(ctx, t, db, flowID) {
		out[x.Step] = x
	}
	return out
}
