package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/bench"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
)

// BenchCmd is `ffd bench`.
type BenchCmd struct {
	Scenario      string        `name:"scenario" required:"" enum:"throughput,enqueue,chain,hop,fanout,cancel-flow,recovery,cancel-running" help:"throughput, enqueue, chain, hop, fanout, cancel-flow, recovery or cancel-running."`
	JSON          bool          `name:"json" help:"Print the report as JSON (schema in docs/benchmarks.md)."`
	Executions    int           `name:"executions" default:"20000" help:"throughput, enqueue: executions."`
	Creates       int           `name:"creates" default:"1000" help:"enqueue: single Create calls timed one by one."`
	Workers       int           `name:"workers" default:"100" help:"throughput: worker concurrency."`
	Flows         int           `name:"flows" default:"200" help:"chain: flows."`
	ChainLength   int           `name:"chain-length" default:"10" help:"chain: nodes per chain."`
	ChainWorkers  int           `name:"chain-workers" default:"16" help:"chain, hop: worker concurrency."`
	HopChains     int           `name:"hop-chains" default:"4" help:"hop: chains at a time (the workers stay mostly idle)."`
	HopLength     int           `name:"hop-length" default:"25" help:"hop: nodes per chain."`
	FanWidth      int           `name:"fan-width" default:"1000" help:"fanout: middles and siblings."`
	Repeats       int           `name:"repeats" default:"5" help:"fanout, cancel-flow: repeats per measurement."`
	FlowSizes     []int         `name:"flow-sizes" default:"10,100,1000" help:"cancel-flow: member counts."`
	Leases        int           `name:"leases" default:"1000" help:"recovery: leases of vanished workers."`
	LeaseTTL      time.Duration `name:"lease-ttl" default:"2s" help:"recovery: their TTL."`
	Burst         int           `name:"burst" default:"10000" help:"recovery: completions while the listener is killed."`
	Cancels       int           `name:"cancels" default:"200" help:"cancel-running: running executions cancelled one by one."`
	SweepInterval time.Duration `name:"sweep-interval" default:"1s" help:"The in-process daemon's sweep interval."`
}

// Run runs the scenario on a fresh private Postgres (fsync on), or in the
// given database, cleaning up its own rows afterwards.
func (c *BenchCmd) Run(ctx context.Context, g *Globals) error {
	url := g.DatabaseURL
	private := url == ""
	if private {
		dir, err := os.MkdirTemp("", "ffd-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
		srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), Durable: true,
			Settings: map[string]string{"shared_buffers": "256MB"}})
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgserver.DefaultStopTimeout)
			defer cancel()
			_ = srv.Stop(sctx)
		}()
		url = srv.URL("postgres")
	}
	cfg, err := g.poolConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(max(20, min(c.Workers/2, 60)))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if private {
		if _, err := schema.Up(ctx, pool, 0); err != nil {
			return err
		}
	} else if err := schema.Check(ctx, pool); err != nil {
		return err
	}
	env := bench.NewEnv(pool, url, g.log)
	if !private {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			if err := env.Cleanup(cctx); err != nil {
				fmt.Fprintln(os.Stderr, "ffd bench:", err)
			}
		}()
	}
	r, err := bench.Run(ctx, env, c.Scenario, bench.Params{Executions: c.Executions, Workers: c.Workers, Flows: c.Flows,
		ChainLength: c.ChainLength, ChainWorker: c.ChainWorkers, FanWidth: c.FanWidth, Repeats: c.Repeats, FlowSizes: c.FlowSizes,
		Leases: c.Leases, LeaseTTL: c.LeaseTTL, Burst: c.Burst, SweepInterval: c.SweepInterval, Cancels: c.Cancels, Creates: c.Creates, HopChains: c.HopChains, HopLength: c.HopLength})
	if err != nil {
		return err
	}
	if c.JSON {
		enc := json.NewEncoder(g.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	m := r.Machine
	fmt.Fprintf(g.stdout, "scenario %s (%d ms) on %d cores, PostgreSQL %s, fsync=%s, synchronous_commit=%s\n",
		r.Scenario, r.DurationMS, m.Cores, m.PostgresVersion, m.Fsync, m.SynchronousCommit)
	keys := make([]string, 0, len(r.Figures))
	for k := range r.Figures {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, _ := json.Marshal(r.Figures[k])
		fmt.Fprintf(g.stdout, "  %-40s %s\n", k, b)
	}
	for _, t := range r.Targets {
		verdict := "MET"
		if !t.Met {
			verdict = "not met"
		}
		fmt.Fprintf(g.stdout, "  target %-34s %10.2f %-4s goal %-28s %s\n", t.Name, t.Value, t.Unit, t.Goal, verdict)
	}
	return nil
}
