package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// keys: the throughput scenario's work three ways in one run, so their
// ratios are measured on the same machine at the same time: without
// keys (the plain claim), spread over Keys distinct concurrency keys of
// limit 1 (the controlled claim, taking turns, counting each key's
// running executions), and all under one hot key without a limit (every
// claim contends for that key's row). Figures: each way's executions per
// second and database time per execution, and the keyed ways' rates as a
// fraction of the unkeyed one. With a lane rate every way's lane is
// rate-limited, so all three take the controlled claim.
func keys(ctx context.Context, env *Env, p Params, r *Report) error {
	ways := []struct {
		name string
		vary func(int, *ffdtype.CreateParams)
	}{
		{"no_keys", nil},
		{fmt.Sprintf("keys_%d_limit_1", p.Keys), func(i int, c *ffdtype.CreateParams) {
			c.ConcurrencyKey, c.ConcurrencyLimit = fmt.Sprint("tenant-", i%p.Keys), 1
		}},
		{"one_hot_key", func(_ int, c *ffdtype.CreateParams) { c.ConcurrencyKey = "hot" }},
	}
	var base float64
	ratios := map[string]float64{}
	for i, w := range ways {
		if p.LaneRate > 0 {
			rate := ffdtype.Rate{Count: p.LaneRate, Per: time.Second, Burst: p.LaneRate}
			if _, err := store.SetLane(ctx, env.Pool, env.lane("keys-"+w.name), store.LaneChange{Rate: &rate}); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
		f, err := env.workVaried(ctx, "keys-"+w.name, p.Executions, p.Workers, p.SweepInterval, w.vary)
		if err != nil {
			return fmt.Errorf("%s: %w", w.name, err)
		}
		if p.LaneRate > 0 {
			// The run's lanes leave no rate behind in a database kept
			// for benches.
			if _, err := store.SetLane(ctx, env.Pool, env.lane("keys-"+w.name), store.LaneChange{Rate: &ffdtype.Rate{}}); err != nil {
				return fmt.Errorf("%s: %w", w.name, err)
			}
		}
		m := map[string]any{}
		f.into(m)
		r.Figures[w.name] = m
		if i == 0 {
			base = f.Rate
		} else if base > 0 {
			ratios[w.name] = f.Rate / base
			r.Figures[w.name+"_vs_no_keys"] = f.Rate / base
		}
	}
	// What flow control may cost (the "Speed III" targets,
	// docs/benchmarks.md): a claim of many keys a few index probes per
	// key, a hot key one contended row.
	hot, many := ratios["one_hot_key"], ratios[ways[1].name]
	r.Targets = append(r.Targets,
		target("one_hot_key_vs_no_keys", ">= 0.75", hot, "x", hot >= 0.75),
		target(ways[1].name+"_vs_no_keys", ">= 0.5", many, "x", many >= 0.5))
	return env.checkInvariants(ctx)
}
