package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// spawn: fan-out at run time, 1 -> FanWidth children -> join, where the
// root adds the children and the join with its completion
// (CompleteAndSpawn); beside it the same shape submitted whole (the
// big-flow scenario's), so that the cost of adding steps at run time
// shows against the cost of declaring them. Figures: the spawning
// completion's latency, and the flow's run from the root's claim to its
// end, per child.
func spawn(ctx context.Context, env *Env, p Params, r *Report) error {
	lane := env.lane("spawn")
	c, stop, err := env.engine(ctx, p.SweepInterval, lane, p.Workers)
	if err != nil {
		return err
	}
	defer stop()
	n := p.FanWidth
	reps := max(1, min(5, 2000/n))
	children := make([]ffd.CreateParams, n)
	for i := range children {
		children[i] = ffd.CreateParams{Lane: lane}
	}
	var commits, spawnedRuns, submittedRuns []float64
	for range reps {
		// At run time: the root is claimed here, and completed with the
		// spawn, so the completion's latency is the spawn's.
		sub, err := c.SubmitFlow(ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "root", Params: ffd.CreateParams{Lane: lane + ".root"}}}})
		if err != nil {
			return fmt.Errorf("submit the root: %w", err)
		}
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane + ".root", Worker: "bench/spawn"})
		if err != nil || len(xs) != 1 {
			return fmt.Errorf("claim the root: %d, %w", len(xs), err)
		}
		t := time.Now()
		if _, _, err := c.CompleteAndSpawn(ctx, xs[0].ID, xs[0].LeaseEpoch, nil,
			ffd.Map("c", children, &ffd.SubmitNode{Ref: "join", Params: ffd.CreateParams{Lane: lane}})); err != nil {
			return fmt.Errorf("spawn %d children: %w", n, err)
		}
		commits = append(commits, ms(time.Since(t)))
		run, err := flowRun(ctx, env, sub)
		if err != nil {
			return err
		}
		spawnedRuns = append(spawnedRuns, run)
		// Declared: the same shape submitted whole.
		if sub, err = c.SubmitFlow(ctx, fanSpec(lane, n)); err != nil {
			return fmt.Errorf("submit 1 -> %d -> 1: %w", n, err)
		}
		if run, err = flowRun(ctx, env, sub); err != nil {
			return err
		}
		submittedRuns = append(submittedRuns, run)
	}
	spawned, submitted := median(spawnedRuns), median(submittedRuns)
	r.Figures["spawn"] = map[string]float64{
		"children": float64(n), "spawn_commit_ms": median(commits),
		"spawned_run_ms": spawned, "spawned_us_per_child": spawned * 1000 / float64(n),
		"submitted_run_ms": submitted, "submitted_us_per_child": submitted * 1000 / float64(n),
	}
	ratio := spawned / submitted
	r.Targets = append(r.Targets, target("spawned_vs_submitted_run", "<= 1.5", ratio, "x", ratio <= 1.5))
	if err := env.settle(ctx); err != nil {
		return err
	}
	return env.checkInvariants(ctx)
}

// flowRun waits for a flow to complete and returns its run, from its
// root's claim to its end, in milliseconds.
func flowRun(ctx context.Context, env *Env, sub *ffd.SubmittedFlow) (float64, error) {
	f := sub.Flow.ID
	if err := pollUntil(ctx, "the flow to finish", 10*time.Minute, 10*time.Millisecond, func() (bool, error) {
		state, err := store.ReadFlowState(ctx, env.Pool, sub.Flow.Partition, f)
		if err != nil {
			return false, err
		}
		if state != ffdtype.FlowOpen && state != ffdtype.FlowCompleted {
			return false, fmt.Errorf("flow ended %s, want completed", state)
		}
		return state == ffdtype.FlowCompleted, nil
	}); err != nil {
		return 0, err
	}
	span, err := store.FlowSpan(ctx, env.Pool, f, sub.Executions["root"].ID)
	if err != nil {
		return 0, err
	}
	return float64(span.Microseconds()) / 1000, nil
}
