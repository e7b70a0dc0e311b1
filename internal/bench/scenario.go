package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

func (e *Env) client() (*ffd.Client, error) {
	return ffd.NewClient(e.Pool, &ffd.Config{Namespace: e.Namespace})
}

func (e *Env) createMany(ctx context.Context, p ffdtype.CreateParams, n int) error {
	return e.createVaried(ctx, p, n, nil)
}

// createVaried is createMany with vary, when set, changing the i-th
// execution's params.
func (e *Env) createVaried(ctx context.Context, p ffdtype.CreateParams, n int, vary func(i int, p *ffdtype.CreateParams)) error {
	p.Namespace = e.Namespace
	for done := 0; done < n; {
		k := min(1000, n-done)
		ps := make([]ffdtype.CreateParams, k)
		for i := range ps {
			ps[i] = p
			if vary != nil {
				vary(done+i, &ps[i])
			}
		}
		ns, err := leases.NormalizeAll(leases.Limits{}, ps)
		if err != nil {
			return err
		}
		err = store.InTx(ctx, e.Pool, func(tx pgx.Tx) error {
			_, err := leases.InsertMany(ctx, tx, ns)
			return err
		})
		if err != nil {
			return err
		}
		done += k
	}
	return nil
}

type runningDaemon struct {
	d    *daemon.Daemon
	stop func()
}

// startDaemon runs a daemon in the background until stop.
func (e *Env) startDaemon(ctx context.Context, sweep time.Duration) (*runningDaemon, error) {
	return e.startDaemonOn(ctx, e.Pool, sweep)
}

// startDaemonOn is startDaemon on a pool of the caller's, as a daemon in
// a process of its own would have.
func (e *Env) startDaemonOn(ctx context.Context, pool *pgxpool.Pool, sweep time.Duration) (*runningDaemon, error) {
	d, err := daemon.New(daemon.Config{Pool: pool, SweepInterval: sweep, Logger: e.Log.Named("daemon"), Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	stop := func() {
		if err := d.Stop(context.Background()); err != nil {
			e.Log.Warn("daemon stopped with an error", zap.Error(err))
		}
	}
	return &runningDaemon{d: d, stop: stop}, nil
}

func (e *Env) startWorker(ctx context.Context, lanes []string, concurrency int, h ffd.HandlerFunc) (func(), error) {
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	w, err := ffd.NewWorker(c, ffd.WorkerConfig{Lanes: lanes, Concurrency: concurrency, Handler: h, ID: "bench", PollInterval: 100 * time.Millisecond})
	if err != nil {
		return nil, err
	}
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = w.Stop(sctx)
	}, nil
}

// engine is what a flow scenario runs on: a client, a daemon and, when
// slots > 0, a no-op worker with that many slots on lane. stop ends them,
// the worker first.
func (e *Env) engine(ctx context.Context, sweep time.Duration, lane string, slots int) (*ffd.Client, func(), error) {
	c, err := e.client()
	if err != nil {
		return nil, nil, err
	}
	d, err := e.startDaemon(ctx, sweep)
	if err != nil {
		return nil, nil, err
	}
	if slots == 0 {
		return c, d.stop, nil
	}
	stopWorker, err := e.startWorker(ctx, []string{lane}, slots, noop)
	if err != nil {
		d.stop()
		return nil, nil, err
	}
	return c, func() { stopWorker(); d.stop() }, nil
}

// noop is the handler of every no-op workload.
func noop(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }

// left counts a lane's executions not yet finished. Both counts read
// partial indexes, so a poll costs the same over a table of a million
// finished rows as over an empty one.
func (e *Env) left(ctx context.Context, lane string) (int, error) {
	return store.Unfinished(ctx, e.Pool, lane)
}

// waitUntil polls cond (a cheap query) every 5 ms until it holds.
func waitUntil(ctx context.Context, what string, limit time.Duration, cond func() (bool, error)) error {
	return pollUntil(ctx, what, limit, 5*time.Millisecond, cond)
}

// pollUntil polls cond every interval until it holds.
func pollUntil(ctx context.Context, what string, limit, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", limit, what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// xactCommits reads the database's committed transactions (statistics are
// flushed by backends about once a second, so callers wait first).
func (e *Env) xactCommits(ctx context.Context) (int64, error) {
	var n int64
	err := e.Pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	return n, err
}

// settle waits until the daemon has dispatched every event of the run.
func (e *Env) settle(ctx context.Context) error {
	return waitUntil(ctx, "the cascade to settle", 2*time.Minute, func() (bool, error) {
		n, err := store.NamespaceBacklog(ctx, e.Pool, e.Namespace, true)
		return n == 0, err
	})
}

func (e *Env) checkInvariants(ctx context.Context) error {
	if err := store.CheckInvariants(ctx, e.Pool); err != nil {
		return fmt.Errorf("invariants after the run: %w", err)
	}
	return nil
}

// throughput: N pre-created no-op executions worked by W workers through
// the public Worker API, with the daemon running as in production (it is
// told of every completion and must settle them all).
func throughput(ctx context.Context, env *Env, p Params, r *Report) error {
	f, err := env.work(ctx, "throughput", p.Executions, p.Workers, p.SweepInterval)
	if err != nil {
		return err
	}
	f.into(r.Figures)
	r.Targets = append(r.Targets, target("executions_per_second", ">= 15000 at 100 workers", f.Rate, "1/s", f.Rate >= 15000))
	return env.checkInvariants(ctx)
}

// workFigures are one throughput run's results.
type workFigures struct {
	Rate   float64 // executions per second over the attempts' own span
	Wall   time.Duration
	Lat    [3]time.Duration // claim -> complete p50, p95, p99
	Tx     float64          // committed transactions per execution
	DBus   float64          // database time per execution, µs
	HasDB  bool
	Worker int
	N      int
}

func (f workFigures) into(m map[string]any) {
	m["executions_per_second"] = f.Rate
	m["wall_seconds"] = f.Wall.Seconds()
	m["claim_to_complete_ms"] = map[string]float64{"p50": ms(f.Lat[0]), "p95": ms(f.Lat[1]), "p99": ms(f.Lat[2])}
	m["transactions_per_execution"] = f.Tx
	if f.HasDB {
		// Claims, completions, the daemon's share and the bench's own
		// end-of-run polls, which are a few per second.
		m["db_us_per_execution"] = f.DBus
	}
}

// work creates n no-op executions in a lane of their own, starts the
// daemon, and has a worker of the given concurrency drain them.
func (e *Env) work(ctx context.Context, name string, n, workers int, sweep time.Duration) (workFigures, error) {
	return e.workVaried(ctx, name, n, workers, sweep, nil)
}

// workVaried is work with the executions' params changed by vary (nil:
// none).
func (e *Env) workVaried(ctx context.Context, name string, n, workers int, sweep time.Duration, vary func(int, *ffdtype.CreateParams)) (workFigures, error) {
	f := workFigures{Worker: workers, N: n}
	lane := e.lane(name)
	if err := e.createVaried(ctx, ffdtype.CreateParams{Lane: lane}, n, vary); err != nil {
		return f, err
	}
	d, err := e.startDaemon(ctx, sweep)
	if err != nil {
		return f, err
	}
	defer d.stop()
	time.Sleep(1100 * time.Millisecond) // let the statistics of the set-up settle
	before, err := e.xactCommits(ctx)
	if err != nil {
		return f, err
	}
	db0, hasDB := e.dbTime(ctx)
	start := time.Now()
	var ran atomic.Int64
	stop, err := e.startWorker(ctx, []string{lane}, workers, func(context.Context, *ffd.Job) ([]byte, error) {
		ran.Add(1)
		return nil, nil
	})
	if err != nil {
		return f, err
	}
	// The rate comes from the attempts' own timestamps; this wait only
	// notices the end. It asks the database only once every handler has
	// run, and rarely: a count spans every shard of a distributed
	// Postgres, and would take the cores the work it measures runs on.
	err = pollUntil(ctx, "every execution to complete", 10*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if ran.Load() < int64(n) {
			return false, nil
		}
		n, err := e.left(ctx, lane)
		return n == 0, err
	})
	f.Wall = time.Since(start)
	stop()
	if err != nil {
		return f, err
	}
	if err := e.settle(ctx); err != nil {
		return f, err
	}
	if db1, _ := e.dbTime(ctx); hasDB {
		f.HasDB, f.DBus = true, float64((db1-db0).Microseconds())/float64(n)
	}
	time.Sleep(1100 * time.Millisecond)
	after, err := e.xactCommits(ctx)
	if err != nil {
		return f, err
	}
	f.Tx = float64(after-before) / float64(n)
	lat, err := store.AttemptDurations(ctx, e.Pool, lane)
	if err != nil {
		return f, err
	}
	if f.Rate, err = e.firstTimeRate(ctx, lane, n); err != nil {
		return f, err
	}
	copy(f.Lat[:], percentiles(lat, 50, 95, 99))
	return f, nil
}

// chainSpec is a linear all_of chain.
func chainSpec(lane string, n int) ffd.SubmitFlowParams {
	var s ffd.SubmitFlowParams
	for i := range n {
		s.Nodes = append(s.Nodes, ffd.SubmitNode{Ref: fmt.Sprint("n", i), Params: ffd.CreateParams{Lane: lane}})
		if i > 0 {
			s.Edges = append(s.Edges, ffd.SubmitEdge{From: fmt.Sprint("n", i-1), To: fmt.Sprint("n", i)})
		}
	}
	return s
}

// hop: the chain scenario with many short chains, for the hop delay.
func hop(ctx context.Context, env *Env, p Params, r *Report) error {
	p.Flows, p.ChainLength = p.HopChains, p.HopLength
	return chain(ctx, env, p, r)
}

// chain: F linear all_of chains through the daemon and 16 workers.
func chain(ctx context.Context, env *Env, p Params, r *Report) error {
	lane := env.lane("chain")
	c, stop, err := env.engine(ctx, p.SweepInterval, lane, p.ChainWorker)
	if err != nil {
		return err
	}
	defer stop()
	start := time.Now()
	for range p.Flows {
		if _, err := c.SubmitFlow(ctx, chainSpec(lane, p.ChainLength)); err != nil {
			return err
		}
	}
	err = waitUntil(ctx, "every chain to complete", 10*time.Minute, func() (bool, error) {
		n, err := store.CompletedFlows(ctx, env.Pool, env.Namespace)
		return n >= p.Flows, err
	})
	wall := time.Since(start)
	if err != nil {
		return err
	}
	// Hop: the upstream's completion event (inserted at its commit) to the
	// downstream's claim.
	hops, err := store.HopDelays(ctx, env.Pool, env.Namespace)
	if err != nil {
		return err
	}
	if len(hops) != p.Flows*(p.ChainLength-1) {
		return fmt.Errorf("measured %d hops, want %d", len(hops), p.Flows*(p.ChainLength-1))
	}
	// The engine's part of the hop: the upstream's event to the downstream
	// made claimable (its run_at is set by the cascade transaction). The
	// rest is the wait for a free worker slot behind the lane's queue.
	ready, err := store.ReadyDelays(ctx, env.Pool, env.Namespace)
	if err != nil {
		return err
	}
	pc, rc := percentiles(hops, 50, 99), percentiles(ready, 50, 99)
	r.Figures["flows_per_second"] = float64(p.Flows) / wall.Seconds()
	r.Figures["hop_ms"] = map[string]float64{"p50": ms(pc[0]), "p99": ms(pc[1])}
	r.Figures["hop_to_claimable_ms"] = map[string]float64{"p50": ms(rc[0]), "p99": ms(rc[1])}
	// What the hop spent waiting for a worker slot behind other ready work
	// rather than in the engine (mean over the hops).
	var sumHop, sumReady time.Duration
	for i := range hops {
		sumHop += hops[i]
	}
	for i := range ready {
		sumReady += ready[i]
	}
	if sumHop > 0 {
		r.Figures["queueing_share_of_hop"] = 1 - float64(sumReady)/float64(sumHop)
	}
	r.Targets = append(r.Targets,
		target("hop_p50_ms", "<= 3", ms(pc[0]), "ms", ms(pc[0]) <= 3),
		target("hop_p99_ms", "<= 15", ms(pc[1]), "ms", ms(pc[1]) <= 15))
	if err := env.settle(ctx); err != nil {
		return err
	}
	return env.checkInvariants(ctx)
}

// fanout: the 1 -> N -> 1 all_of join latency, and the time to cancel N
// running siblings after the first success of an any_of group.
func fanout(ctx context.Context, env *Env, p Params, r *Report) error {
	c, stop, err := env.engine(ctx, p.SweepInterval, "", 0)
	if err != nil {
		return err
	}
	defer stop()
	var joins, cancels []time.Duration
	for rep := range p.Repeats {
		join, err := fanJoin(ctx, env, c, p, env.lane(fmt.Sprint("fan", rep)))
		if err != nil {
			return err
		}
		joins = append(joins, join)
		spread, err := fanRace(ctx, env, c, p, env.lane(fmt.Sprint("race", rep)))
		if err != nil {
			return err
		}
		cancels = append(cancels, spread)
	}
	jp, cp := percentiles(joins, 50, 99), percentiles(cancels, 50, 99)
	r.Figures["join_ms"] = map[string]float64{"p50": ms(jp[0]), "p99": ms(jp[1])}
	r.Figures["siblings_cancelled_ms"] = map[string]float64{"p50": ms(cp[0]), "p99": ms(cp[1])}
	r.Targets = append(r.Targets,
		target("join_after_last_middle_ms", "<= 50", ms(jp[1]), "ms", ms(jp[1]) <= 50),
		target("siblings_cancelled_p99_ms", "<= 50", ms(cp[1]), "ms", ms(cp[1]) <= 50))
	if err := env.settle(ctx); err != nil {
		return err
	}
	return env.checkInvariants(ctx)
}

// fanDAG is root -> N middles (or siblings) -> one last node with policy.
func fanDAG(lane, middle, last string, width int, policy *ffd.Policy) ffd.SubmitFlowParams {
	spec := ffd.SubmitFlowParams{}
	spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: "root", Params: ffd.CreateParams{Lane: lane + ".root"}},
		ffd.SubmitNode{Ref: last, Params: ffd.CreateParams{Lane: lane + "." + last}, Policy: policy})
	for i := range width {
		ref := fmt.Sprint("m", i)
		spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane + "." + middle}})
		spec.Edges = append(spec.Edges, ffd.SubmitEdge{From: "root", To: ref}, ffd.SubmitEdge{From: ref, To: last})
	}
	return spec
}

// fanJoin runs 1 -> N -> 1 all_of, completing the middles here in
// batches, and returns the join's delay after the last middle.
func fanJoin(ctx context.Context, env *Env, c *ffd.Client, p Params, lane string) (time.Duration, error) {
	sub, err := c.SubmitFlow(ctx, fanDAG(lane, "mid", "join", p.FanWidth, nil))
	if err != nil {
		return 0, err
	}
	if err := claimComplete(ctx, c, lane+".root", 1); err != nil {
		return 0, err
	}
	if err := claimComplete(ctx, c, lane+".mid", p.FanWidth); err != nil {
		return 0, err
	}
	join := sub.Executions["join"].ID
	if err := waitUntil(ctx, "the join to become claimable", time.Minute, func() (bool, error) {
		x, err := c.Get(ctx, join)
		return err == nil && x.State == ffd.StatePending, err
	}); err != nil {
		return 0, err
	}
	return store.JoinDelay(ctx, env.Pool, join, lane+".mid")
}

// fanRace runs any_of + cancel_remaining over N running siblings and
// returns the spread from the winner's completion to the last sibling's
// cancellation.
func fanRace(ctx context.Context, env *Env, c *ffd.Client, p Params, lane string) (time.Duration, error) {
	policy := &ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}
	if _, err := c.SubmitFlow(ctx, fanDAG(lane, "sib", "use", p.FanWidth, policy)); err != nil {
		return 0, err
	}
	if err := claimComplete(ctx, c, lane+".root", 1); err != nil {
		return 0, err
	}
	var running []*ffd.Execution
	if err := waitUntil(ctx, "every sibling to be claimed", time.Minute, func() (bool, error) {
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane + ".sib", Worker: "bench/siblings", Max: min(1000, p.FanWidth-len(running))})
		running = append(running, xs...)
		return len(running) == p.FanWidth, err
	}); err != nil {
		return 0, err
	}
	winner := running[0]
	if _, err := c.Complete(ctx, winner.ID, winner.LeaseEpoch, nil); err != nil {
		return 0, err
	}
	if err := waitUntil(ctx, "every sibling to be cancelled", time.Minute, func() (bool, error) {
		n, err := store.CountInLanes(ctx, env.Pool, ffdtype.StateCancelled, lane+".sib")
		return n == p.FanWidth-1, err
	}); err != nil {
		return 0, err
	}
	// Fenced and evented: every loser's epoch moved on and it has its
	// completion event; its late completion is refused.
	fenced, err := store.FencedCancellations(ctx, env.Pool, lane+".sib", 2)
	if err != nil || fenced != p.FanWidth-1 {
		return 0, fmt.Errorf("%d of %d siblings fenced and evented (%v)", fenced, p.FanWidth-1, err)
	}
	if _, err := c.Complete(ctx, running[1].ID, running[1].LeaseEpoch, nil); !errors.Is(err, ffd.ErrLeaseLost) {
		return 0, fmt.Errorf("a cancelled sibling's late completion: %v, want lease lost", err)
	}
	return store.CancelSpread(ctx, env.Pool, lane+".sib", winner.ID)
}

// claimComplete claims and completes n executions of a lane in batches.
func claimComplete(ctx context.Context, c *ffd.Client, lane string, n int) error {
	done := 0
	return waitUntil(ctx, "claiming "+lane, time.Minute, func() (bool, error) {
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "bench/driver", Max: min(500, n-done)})
		if err != nil || len(xs) == 0 {
			return false, err
		}
		items := make([]leases.Completion, len(xs))
		for i, x := range xs {
			items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch, Solo: x.FlowID == nil}
		}
		_, errs, err := leases.CompleteMany(ctx, c.Pool(), leases.Limits{}, items, 0)
		if err != nil {
			return false, err
		}
		for _, e := range errs {
			if e != nil {
				return false, e
			}
		}
		done += len(xs)
		return done >= n, nil
	})
}

// cancelFlow: cancel_all on flows of several sizes, half running, half
// pending.
func cancelFlow(ctx context.Context, env *Env, p Params, r *Report) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	results := map[string]map[string]float64{}
	for _, size := range p.FlowSizes {
		var ds []time.Duration
		reps := max(p.Repeats, 3)
		if size <= 100 {
			reps = max(p.Repeats*4, 5)
		}
		for rep := range reps {
			lane := env.lane(fmt.Sprintf("cancel%d_%d", size, rep))
			spec := ffd.SubmitFlowParams{}
			for i := range size {
				spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: fmt.Sprint("n", i), Params: ffd.CreateParams{Lane: lane}})
			}
			sub, err := c.SubmitFlow(ctx, spec)
			if err != nil {
				return err
			}
			if _, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "bench/holder", Max: size / 2}); err != nil {
				return err
			}
			start := time.Now()
			res, err := c.CancelFlow(ctx, sub.Flow.ID, ffd.CancelAll, "bench")
			ds = append(ds, time.Since(start))
			if err != nil {
				return err
			}
			if len(res.Members) != size {
				return fmt.Errorf("cancel_all cancelled %d of %d members", len(res.Members), size)
			}
		}
		pc := percentiles(ds, 50, 99)
		results[fmt.Sprint(size)] = map[string]float64{"p50": ms(pc[0]), "p99": ms(pc[1])}
		if size == slices.Max(p.FlowSizes) {
			r.Targets = append(r.Targets, target(fmt.Sprintf("cancel_flow_%d_p99_ms", size), "<= 30 (for 1000 members)", ms(pc[1]), "ms", ms(pc[1]) <= 30))
		}
	}
	r.Figures["cancel_flow_ms"] = results
	return env.checkInvariants(ctx)
}

// recovery: leases of vanished workers are re-claimed after their TTL; a
// burst of completions is dispatched after the listener comes back.
func recovery(ctx context.Context, env *Env, p Params, r *Report) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	lane := env.lane("recovery")
	if err := env.createMany(ctx, ffdtype.CreateParams{Lane: lane, LeaseTTL: p.LeaseTTL, Retry: ffdtype.RetryPolicy{Base: time.Millisecond, Max: time.Millisecond}}, p.Leases); err != nil {
		return err
	}
	d, err := env.startDaemon(ctx, p.SweepInterval)
	if err != nil {
		return err
	}
	defer d.stop()
	// The vanishing workers: they claim and are never heard of again.
	held := 0
	if err := waitUntil(ctx, "the leases to be taken", time.Minute, func() (bool, error) {
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "vanished/1", Max: min(1000, p.Leases-held)})
		held += len(xs)
		return held == p.Leases, err
	}); err != nil {
		return err
	}
	stop, err := env.startWorker(ctx, []string{lane}, 100, noop)
	if err != nil {
		return err
	}
	err = waitUntil(ctx, "every lease re-claimed and completed", 5*time.Minute, func() (bool, error) {
		n, err := store.CountInLanes(ctx, env.Pool, ffdtype.StateCompleted, lane)
		return n == p.Leases, err
	})
	stop()
	if err != nil {
		return err
	}
	reclaim, err := store.ReclaimDelay(ctx, env.Pool, lane)
	if err != nil {
		return err
	}
	r.Figures["reclaimed_after_ttl_ms"] = ms(reclaim)
	r.Targets = append(r.Targets, target("reclaim_after_ttl_ms", fmt.Sprintf("<= sweep interval (%s)", p.SweepInterval), ms(reclaim), "ms", reclaim <= p.SweepInterval))
	return burstWhileListenerKilled(ctx, env, c, d, p, r)
}

// burstWhileListenerKilled completes a burst of solo executions in batches
// while the daemon's LISTEN backend is killed, and measures how soon after
// the listener is back every event is dispatched.
func burstWhileListenerKilled(ctx context.Context, env *Env, c *ffd.Client, d *runningDaemon, p Params, r *Report) error {
	burst := env.lane("burst")
	if err := env.createMany(ctx, ffdtype.CreateParams{Lane: burst}, p.Burst); err != nil {
		return err
	}
	var wg sync.WaitGroup
	var burstErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		burstErr = claimComplete(ctx, c, burst, p.Burst)
	}()
	time.Sleep(20 * time.Millisecond)
	killed, err := store.Backends(ctx, env.Pool, daemon.ListenApplicationName)
	if err != nil {
		return err
	}
	if _, err := store.TerminateBackends(ctx, env.Pool, killed); err != nil {
		return err
	}
	wg.Wait()
	if burstErr != nil {
		return burstErr
	}
	if err := waitUntil(ctx, "the listener to come back", time.Minute, func() (bool, error) {
		now, err := store.Backends(ctx, env.Pool, daemon.ListenApplicationName)
		back := len(now) > 0 && !slices.ContainsFunc(now, func(pid int32) bool { return slices.Contains(killed, pid) })
		return back && d.d.Ready(), err
	}); err != nil {
		return err
	}
	back := time.Now()
	if err := waitUntil(ctx, "every burst event dispatched", 5*time.Minute, func() (bool, error) {
		n, err := store.NamespaceBacklog(ctx, env.Pool, env.Namespace, false)
		return n == 0, err
	}); err != nil {
		return err
	}
	after := time.Since(back)
	r.Figures["burst_dispatched_after_reconnect_ms"] = ms(after)
	r.Targets = append(r.Targets, target("burst_dispatched_after_reconnect_ms", "<= 2000", ms(after), "ms", after <= 2*time.Second))
	return env.checkInvariants(ctx)
}
