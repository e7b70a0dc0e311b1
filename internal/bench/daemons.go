package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// daemons: cascade dispatch throughput with 1, 2, 4... daemons on one
// database. Each round submits Flows flows of root -> DaemonFan, starts
// the round's daemons (each on a pool of its own, as separate processes
// would be), then finishes every root in batches of 500 and times until
// every completion event is dispatched: a hop is one edge resolved and
// its middle unblocked, Flows x DaemonFan per round. Nothing runs the
// middles, so the rounds measure the cascade alone. Where /proc shows the
// server, the rounds also report the cores Postgres and this process used.
func daemons(ctx context.Context, env *Env, p Params, r *Report) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	curve := map[string]float64{}
	serverCores, clientCores, perHop := map[string]float64{}, map[string]float64{}, map[string]float64{}
	emptyShare := map[string]float64{}
	meter, metered := newCPUMeter(ctx, env.Pool)
	for _, k := range p.DaemonCurve {
		lane := env.lane(fmt.Sprint("daemons", k))
		if err := submitFans(ctx, c, p, lane); err != nil {
			return err
		}
		stop, takes, err := startDaemons(ctx, env, k, p.SweepInterval)
		if err != nil {
			return err
		}
		start := time.Now()
		var before cpuSample
		if metered {
			before, err = meter.sample()
			metered = err == nil
		}
		if err := finishRoots(ctx, env, p, lane); err != nil {
			stop()
			return err
		}
		err = waitUntil(ctx, "every event to be dispatched", 10*time.Minute, func() (bool, error) {
			o, err := store.ReadOutstanding(ctx, env.Pool)
			return o.Undispatched == 0, err
		})
		elapsed := time.Since(start)
		if took, empty := takes(); took+empty > 0 {
			emptyShare[fmt.Sprint(k)] = empty / (took + empty)
		}
		if metered && err == nil {
			after, serr := meter.sample()
			metered = serr == nil
			serverCores[fmt.Sprint(k)], clientCores[fmt.Sprint(k)] = before.cores(after)
			perHop[fmt.Sprint(k)] = (after.server - before.server).Seconds() * 1e3 / float64(p.Flows*p.DaemonFan) * 1000
		}
		stop()
		if err != nil {
			return err
		}
		curve[fmt.Sprint(k)] = float64(p.Flows*p.DaemonFan) / elapsed.Seconds()
	}
	r.Figures["hops_per_second_by_daemons"] = curve
	// Every daemon hears every notification: the share of notified
	// dispatch transactions that found their events already taken is the
	// price of more daemons.
	r.Figures["empty_dispatch_share_by_daemons"] = emptyShare
	if metered {
		// Where the cores went: the daemons (and the driver finishing
		// roots) in this process, against the Postgres server.
		r.Figures["postgres_cores_by_daemons"] = serverCores
		r.Figures["ffd_cores_by_daemons"] = clientCores
		// Postgres's work per hop: flat when daemons do not contend
		// (waits and retries would show here as more work per hop).
		r.Figures["postgres_cpu_ms_per_1000_hops"] = perHop
	}
	if len(p.DaemonCurve) > 1 {
		first, last := p.DaemonCurve[0], p.DaemonCurve[len(p.DaemonCurve)-1]
		gain := curve[fmt.Sprint(last)] / curve[fmt.Sprint(first)]
		// Capacity comes from Postgres cores: on a machine where the
		// daemons and Postgres share two cores the honest expectation is
		// that more daemons cost nothing, not that they add.
		r.Targets = append(r.Targets, target(fmt.Sprintf("hops_%d_vs_%d_daemons", last, first), ">= 0.9 (more daemons never slow dispatch)", gain, "x", gain >= 0.9))
	}
	return env.checkInvariants(ctx)
}

// submitFans submits the round's flows.
func submitFans(ctx context.Context, c *ffd.Client, p Params, lane string) error {
	for range p.Flows {
		s := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "root", Params: ffd.CreateParams{Lane: lane + ".root"}}}}
		for i := range p.DaemonFan {
			ref := fmt.Sprint("m", i)
			s.Nodes = append(s.Nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}})
			s.Edges = append(s.Edges, ffd.SubmitEdge{From: "root", To: ref})
		}
		if _, err := c.SubmitFlow(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// finishRoots claims and completes every root of the round, 500 at a time.
func finishRoots(ctx context.Context, env *Env, p Params, lane string) error {
	for done := 0; done < p.Flows; {
		xs, err := leases.Claim(ctx, env.Pool, ffdtype.ClaimParams{Lane: lane + ".root", Worker: "bench/roots", Max: 500})
		if err != nil {
			return err
		}
		if len(xs) == 0 {
			return fmt.Errorf("claimed %d of %d roots", done, p.Flows)
		}
		items := make([]leases.Completion, len(xs))
		for i, x := range xs {
			items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch, Solo: x.FlowID == nil}
		}
		if _, _, err := leases.CompleteMany(ctx, env.Pool, leases.Limits{}, items, 0); err != nil {
			return err
		}
		done += len(xs)
	}
	return nil
}

// startDaemons runs k daemons, each on its own pool, until stop; takes
// sums their notified dispatch transactions so far.
func startDaemons(ctx context.Context, env *Env, k int, sweep time.Duration) (stop func(), takes func() (took, empty float64), err error) {
	var stops []func()
	var ms []*daemon.Metrics
	takes = func() (took, empty float64) {
		for _, m := range ms {
			t, e := m.DispatchTakes()
			took, empty = took+t, empty+e
		}
		return took, empty
	}
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	for range k {
		cfg, err := pgxpool.ParseConfig(env.URL)
		if err == nil {
			cfg.MaxConns = 10
		}
		var pool *pgxpool.Pool
		if err == nil {
			pool, err = pgxpool.NewWithConfig(ctx, cfg)
		}
		var d *runningDaemon
		if err == nil {
			if d, err = env.startDaemonOn(ctx, pool, sweep); err != nil {
				pool.Close()
			}
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
		ms = append(ms, d.d.Metrics())
		stops = append(stops, func() { d.stop(); pool.Close() })
	}
	return stop, takes, nil
}
