package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowfabric/ffd"
)

// fanSpec is 1 -> n -> 1 all_of, every node in lane.
func fanSpec(lane string, n int) ffd.SubmitFlowParams {
	spec := ffd.SubmitFlowParams{Nodes: make([]ffd.SubmitNode, 0, n+2), Edges: make([]ffd.SubmitEdge, 0, 2*n)}
	spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: "root", Params: ffd.CreateParams{Lane: lane}},
		ffd.SubmitNode{Ref: "join", Params: ffd.CreateParams{Lane: lane}})
	for i := range n {
		ref := fmt.Sprint("m", i)
		spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}})
		spec.Edges = append(spec.Edges, ffd.SubmitEdge{From: "root", To: ref}, ffd.SubmitEdge{From: ref, To: "join"})
	}
	return spec
}

// bigFlow: one 1 -> N -> 1 flow at each size, submitted in one SubmitFlow
// and run by the daemon and a Workers-slot worker; the time per member is
// from the root's claim to the flow's end, divided by N. A cost per
// member that grows with N (a scan of all members per member) shows here.
func bigFlow(ctx context.Context, env *Env, p Params, r *Report) error {
	lane := env.lane("big")
	c, stop, err := env.engine(ctx, p.SweepInterval, lane, p.Workers)
	if err != nil {
		return err
	}
	defer stop()
	sizes := slices.Sorted(slices.Values(p.BigFlowSizes))
	results := map[string]map[string]float64{}
	perMember := map[int]float64{}
	for _, n := range sizes {
		// Small flows are over in milliseconds: repeat them so that one
		// scheduling hiccup does not make the figure.
		reps := max(1, min(5, 1000/n))
		var runs, submits []float64
		for range reps {
			spec := fanSpec(lane, n)
			t := time.Now()
			sub, err := c.SubmitFlow(ctx, spec)
			if err != nil {
				return fmt.Errorf("submit 1 -> %d -> 1: %w", n, err)
			}
			submits = append(submits, ms(time.Since(t)))
			run, err := flowRun(ctx, env, sub)
			if err != nil {
				return fmt.Errorf("1 -> %d -> 1: %w", n, err)
			}
			runs = append(runs, run)
		}
		run := median(runs)
		perMember[n] = run * 1000 / float64(n)
		results[fmt.Sprint(n)] = map[string]float64{"submit_ms": median(submits), "run_ms": run, "us_per_member": perMember[n]}
	}
	r.Figures["big_flow"] = results
	lo, hi := sizes[0], sizes[len(sizes)-1]
	growth := perMember[hi] / perMember[lo]
	r.Targets = append(r.Targets, target(fmt.Sprintf("us_per_member_%d_vs_%d", hi, lo), "<= 1.5", growth, "x", growth <= 1.5))
	if err := env.settle(ctx); err != nil {
		return err
	}
	return env.checkInvariants(ctx)
}
