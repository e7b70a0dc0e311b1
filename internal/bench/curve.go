package bench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// curveSize is how many executions one point of the curve works: enough
// for the rate to be a rate, few enough that one worker finishes in
// seconds.
func curveSize(n, workers int) int { return min(n, max(2000, 200*workers)) }

// curve: the throughput scenario at each worker concurrency, one after the
// other in lanes of their own, so that the rate can be read as a function
// of the concurrency.
func curve(ctx context.Context, env *Env, p Params, r *Report) error {
	points := map[string]map[string]float64{}
	var rates []float64
	for _, w := range p.WorkerCurve {
		f, err := env.work(ctx, fmt.Sprint("curve", w), curveSize(p.Executions, w), w, p.SweepInterval)
		if err != nil {
			return fmt.Errorf("%d workers: %w", w, err)
		}
		pt := map[string]float64{"executions": float64(f.N), "executions_per_second": f.Rate,
			"claim_to_complete_p50_ms": ms(f.Lat[0]), "claim_to_complete_p99_ms": ms(f.Lat[2])}
		if f.HasDB {
			pt["db_us_per_execution"] = f.DBus
		}
		points[fmt.Sprint(w)] = pt
		rates = append(rates, f.Rate)
	}
	r.Figures["by_workers"] = points
	// More workers than the database can serve should cost queueing, not
	// throughput: the widest point keeps 90% of the best rate.
	last, best := rates[len(rates)-1], slices.Max(rates)
	r.Targets = append(r.Targets, target("rate_at_most_workers_vs_best", ">= 0.9", last/best, "x", last/best >= 0.9))
	return env.checkInvariants(ctx)
}

// history: throughput on a database that already holds Preload finished
// executions (with their attempts, lease events and completion events)
// against an empty one, alternately, Rounds times each.
func history(ctx context.Context, env *Env, p Params, r *Report) error {
	if env.NewDatabase == nil {
		return fmt.Errorf("history compares two databases: run it where the bench may create databases")
	}
	empty, dropEmpty, err := env.fresh(ctx)
	if err != nil {
		return err
	}
	defer dropEmpty()
	full, dropFull, err := env.fresh(ctx)
	if err != nil {
		return err
	}
	defer dropFull()
	start := time.Now()
	if err := full.preload(ctx, p.Preload); err != nil {
		return fmt.Errorf("preload %d finished executions: %w", p.Preload, err)
	}
	r.Figures["preload_seconds"] = time.Since(start).Seconds()
	var emptyRates, fullRates, ratios []float64
	for i := range p.Rounds {
		fe, err := empty.work(ctx, fmt.Sprint("history", i), p.Executions, p.Workers, p.SweepInterval)
		if err != nil {
			return fmt.Errorf("empty database: %w", err)
		}
		ff, err := full.work(ctx, fmt.Sprint("history", i), p.Executions, p.Workers, p.SweepInterval)
		if err != nil {
			return fmt.Errorf("database with history: %w", err)
		}
		emptyRates, fullRates = append(emptyRates, fe.Rate), append(fullRates, ff.Rate)
		ratios = append(ratios, ff.Rate/fe.Rate)
	}
	ratio := median(ratios)
	r.Figures["empty_executions_per_second"] = median(emptyRates)
	r.Figures["with_history_executions_per_second"] = median(fullRates)
	r.Figures["with_history_vs_empty"] = ratio
	r.Figures["rounds"] = map[string][]float64{"empty": emptyRates, "with_history": fullRates}
	r.Targets = append(r.Targets, target("with_history_vs_empty", fmt.Sprintf(">= 0.9 with %d finished", p.Preload), ratio, "x", ratio >= 0.9))
	if err := empty.checkInvariants(ctx); err != nil {
		return err
	}
	return full.checkInvariants(ctx)
}

// preload writes n finished executions through the engine itself (create,
// claim, complete), four lanes at a time, then vacuums and analyzes, as a
// database in service would be.
func (e *Env) preload(ctx context.Context, n int) error {
	const lanes = 4
	errs := make(chan error, lanes)
	for k := range lanes {
		go func() {
			lane := e.lane(fmt.Sprint("preload", k))
			share := n / lanes
			if k == 0 {
				share += n % lanes
			}
			for done := 0; done < share; {
				batch := min(leases.MaxClaimBatch, share-done)
				if err := e.createMany(ctx, ffdtype.CreateParams{Lane: lane}, batch); err != nil {
					errs <- err
					return
				}
				if err := finish(ctx, e, lane, batch); err != nil {
					errs <- err
					return
				}
				done += batch
			}
			errs <- nil
		}()
	}
	var first error
	for range lanes {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return first
	}
	if err := store.Analyze(ctx, e.Pool); err != nil {
		return fmt.Errorf("after the preload: %w", err)
	}
	return nil
}

// finish claims and completes n pending executions of a lane.
func finish(ctx context.Context, e *Env, lane string, n int) error {
	for n > 0 {
		xs, err := leases.Claim(ctx, e.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "bench/preload", Max: min(n, leases.MaxClaimBatch)})
		if err != nil {
			return err
		}
		if len(xs) == 0 {
			return fmt.Errorf("lane %s: %d left to claim, none claimable", lane, n)
		}
		items := make([]leases.Completion, len(xs))
		for i, x := range xs {
			items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch, Solo: x.FlowID == nil}
		}
		_, errs, err := leases.CompleteMany(ctx, e.Pool, leases.Limits{}, items, 0)
		if err != nil {
			return err
		}
		for _, err := range errs {
			if err != nil {
				return err
			}
		}
		n -= len(xs)
	}
	return nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
