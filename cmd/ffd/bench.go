package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/bench"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
)

// BenchCmd is `ffd bench`.
type BenchCmd struct {
	Scenario      string        `name:"scenario" required:"" enum:"${bench_scenarios}" help:"One of ${enum}."`
	JSON          bool          `name:"json" help:"Print the report as JSON (schema in docs/benchmarks.md)."`
	Executions    int           `name:"executions" default:"${bench_executions}" help:"throughput, enqueue: executions."`
	Creates       int           `name:"creates" default:"${bench_creates}" help:"enqueue: single Create calls timed one by one."`
	Workers       int           `name:"workers" default:"${bench_workers}" help:"throughput: worker concurrency."`
	Flows         int           `name:"flows" default:"${bench_flows}" help:"chain: flows."`
	ChainLength   int           `name:"chain-length" default:"${bench_chain_length}" help:"chain: nodes per chain."`
	ChainWorkers  int           `name:"chain-workers" default:"${bench_chain_workers}" help:"chain, hop: worker concurrency."`
	HopChains     int           `name:"hop-chains" default:"${bench_hop_chains}" help:"hop: chains at a time (the workers stay mostly idle)."`
	HopLength     int           `name:"hop-length" default:"${bench_hop_length}" help:"hop: nodes per chain."`
	FanWidth      int           `name:"fan-width" default:"${bench_fan_width}" help:"fanout: middles and siblings; spawn: children the root adds at run time."`
	Repeats       int           `name:"repeats" default:"${bench_repeats}" help:"fanout, cancel-flow: repeats per measurement."`
	FlowSizes     []int         `name:"flow-sizes" default:"${bench_flow_sizes}" help:"cancel-flow: member counts."`
	Leases        int           `name:"leases" default:"${bench_leases}" help:"recovery: leases of vanished workers."`
	LeaseTTL      time.Duration `name:"lease-ttl" default:"${bench_lease_ttl}" help:"recovery: their TTL."`
	Burst         int           `name:"burst" default:"${bench_burst}" help:"recovery: completions while the listener is killed."`
	Cancels       int           `name:"cancels" default:"${bench_cancels}" help:"cancel-running: running executions cancelled one by one."`
	SweepInterval time.Duration `name:"sweep-interval" default:"${bench_sweep_interval}" help:"The in-process daemon's sweep interval."`
	WorkerCurve   []int         `name:"worker-curve" default:"${bench_worker_curve}" help:"curve: worker concurrencies."`
	DaemonCurve   []int         `name:"daemon-curve" default:"${bench_daemon_curve}" help:"daemons: numbers of daemons dispatching."`
	DaemonFan     int           `name:"daemon-fan" default:"${bench_daemon_fan}" help:"daemons: middles per flow (hops per root event)."`
	Keys          int           `name:"keys" default:"${bench_keys}" help:"keys: distinct concurrency keys of limit 1."`
	LaneRate      int           `name:"lane-rate" help:"keys: a rate limit on each way's lane, starts a second with a burst as large (0: none); one the work never reaches measures the rate-limited claim."`
	FloorLoops    int           `name:"floor-loops" default:"${bench_floor_loops}" help:"floor, and throughput with --peer: loops claiming and finishing --executions rows."`
	FloorBatch    int           `name:"floor-batch" default:"${bench_floor_batch}" help:"floor: rows each loop claims and finishes per statement."`
	Preload       int           `name:"preload" default:"${bench_preload}" help:"history: finished executions already in the tables."`
	BigFlowSizes  []int         `name:"big-flow-sizes" default:"${bench_big_flow_sizes}" help:"big-flow: fan-out widths of 1 -> N -> 1."`
	MemoryRounds  int           `name:"memory-rounds" default:"${bench_memory_rounds}" help:"memory: rounds of --executions through a daemon and a --workers worker process."`
	LangExecs     int           `name:"lang-executions" default:"${bench_lang_executions}" help:"python-worker: executions each side (Python, Go) works per round."`
	LangWorkers   int           `name:"lang-workers" default:"${bench_lang_workers}" help:"python-worker: handlers each side runs at once."`
	Python        string        `name:"python" help:"python-worker: the Python 3 interpreter (default: FFD_PYTHON, else python3)."`
	PythonClient  string        `name:"python-client" type:"path" help:"python-worker: the Python client's directory (default: clients/python of the checkout the command runs in)."`
	Peer          string        `name:"peer" type:"path" help:"Compare with this peer program (bench/peers/river built; bench/compare.sh builds it): throughput, curve or enqueue, each side in fresh databases, alternately."`
	Rounds        int           `name:"rounds" default:"${bench_rounds}" help:"history, and with --peer: alternating rounds of both sides."`
	CPUProfile    string        `name:"cpu-profile" type:"path" help:"Write a CPU profile of this process (pprof format: go tool pprof) to this file, to see where ffd's own time goes."`
}

// Run runs the scenario on a fresh private Postgres (fsync on), or in the
// given database, cleaning up its own rows afterwards.
func (c *BenchCmd) Run(ctx context.Context, g *Globals) error {
	if c.CPUProfile != "" {
		f, err := os.Create(c.CPUProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	url := g.DatabaseURL
	private := url == ""
	if private {
		u, stop, err := startBenchServer(ctx)
		if err != nil {
			return err
		}
		defer stop()
		url = u
	}
	pool, cfg, err := c.pool(ctx, g, url, private)
	if err != nil {
		return err
	}
	defer pool.Close()
	env := bench.NewEnv(pool, url, g.log)
	env.NewDatabase = c.newDatabase(g, pool, cfg)
	env.ChildArgs = []string{"bench-child"}
	params := bench.Params{Executions: c.Executions, Workers: c.Workers, Flows: c.Flows,
		ChainLength: c.ChainLength, ChainWorker: c.ChainWorkers, FanWidth: c.FanWidth, Repeats: c.Repeats, FlowSizes: c.FlowSizes,
		Leases: c.Leases, LeaseTTL: c.LeaseTTL, Burst: c.Burst, SweepInterval: c.SweepInterval, Cancels: c.Cancels, Creates: c.Creates,
		HopChains: c.HopChains, HopLength: c.HopLength, WorkerCurve: c.WorkerCurve, DaemonCurve: c.DaemonCurve, DaemonFan: c.DaemonFan, Keys: c.Keys, LaneRate: c.LaneRate, FloorLoops: c.FloorLoops, FloorBatch: c.FloorBatch, Preload: c.Preload, BigFlowSizes: c.BigFlowSizes,
		MemoryRounds: c.MemoryRounds, Rounds: c.Rounds, LangExecutions: c.LangExecs, LangWorkers: c.LangWorkers, Python: c.Python,
		PythonClient: c.PythonClient}
	if c.Peer != "" {
		cmp, err := bench.Compare(ctx, env, c.Scenario, params, c.Peer)
		if err != nil {
			return err
		}
		return c.printComparison(g, cmp)
	}
	if !private {
		defer func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			if err := env.Cleanup(cctx); err != nil {
				fmt.Fprintln(os.Stderr, "ffd bench:", err)
			}
		}()
	}
	r, err := bench.Run(ctx, env, c.Scenario, params)
	if err != nil {
		return err
	}
	return c.print(g, r)
}

// startBenchServer starts a private, durable PostgreSQL server for a run
// and returns its URL and how to stop it.
func startBenchServer(ctx context.Context) (url string, stop func(), err error) {
	dir, err := os.MkdirTemp("", "ffd-bench-")
	if err != nil {
		return "", nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	settings := map[string]string{"shared_buffers": "256MB"}
	if pgserver.HasLibrary("pg_stat_statements") {
		// Database time per execution (db_us_per_execution).
		settings["shared_preload_libraries"] = "pg_stat_statements"
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), Durable: true, Settings: settings})
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	return srv.URL("postgres"), func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgserver.DefaultStopTimeout)
		defer cancel()
		_ = srv.Stop(sctx)
		os.RemoveAll(dir)
	}, nil
}

// pool connects the run's pool, sized for its workers, and migrates a
// private server (or checks the schema of a given one).
func (c *BenchCmd) pool(ctx context.Context, g *Globals, url string, private bool) (*pgxpool.Pool, *pgxpool.Config, error) {
	cfg, err := g.poolConfig(url)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = benchConns(c.Workers)
	if c.Scenario == "curve" {
		cfg.MaxConns = benchConns(slices.Max(c.WorkerCurve))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	if private {
		if _, err = schema.Up(ctx, pool, 0); err == nil {
			statStatements(ctx, pool)
		}
	} else {
		err = schema.Check(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, cfg, nil
}

// print writes a run's report: JSON, or one figure and target per line.
func (c *BenchCmd) print(g *Globals, r *bench.Report) error {
	if c.JSON {
		return writeJSON(g.stdout, r)
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

func benchConns(workers int) int32 { return int32(max(20, min(workers/2, 60))) }

// statStatements installs pg_stat_statements where the server preloads
// it; without it the reports leave database time out.
func statStatements(ctx context.Context, pool *pgxpool.Pool) {
	_, _ = pool.Exec(ctx, `DO $$ BEGIN
		IF current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%' THEN
			CREATE EXTENSION IF NOT EXISTS pg_stat_statements;
		END IF;
	END $$`)
}

// newDatabase makes fresh migrated databases next to the bench's own (for
// history and for comparisons), dropped again after use.
func (c *BenchCmd) newDatabase(g *Globals, admin *pgxpool.Pool, base *pgxpool.Config) func(context.Context) (*pgxpool.Pool, string, func(), error) {
	var n atomic.Int64
	return func(ctx context.Context) (*pgxpool.Pool, string, func(), error) {
		name := fmt.Sprintf("ffd_bench_%d_%d", os.Getpid(), n.Add(1))
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
			return nil, "", nil, fmt.Errorf("create database %s: %w", name, err)
		}
		drop := func() {
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if _, err := admin.Exec(dctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
				g.log.Warn("drop a bench database", zap.String("database", name), zap.Error(err))
			}
		}
		cfg := base.Copy()
		cfg.ConnConfig.Database = name
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			drop()
			return nil, "", nil, err
		}
		if _, err := schema.Up(ctx, pool, 0); err != nil {
			pool.Close()
			drop()
			return nil, "", nil, err
		}
		statStatements(ctx, pool)
		return pool, withDatabase(base.ConnString(), name), func() { pool.Close(); drop() }, nil
	}
}

// withDatabase is a connection string naming another database.
func withDatabase(conn, name string) string {
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Path = "/" + name
		return u.String()
	}
	return conn + " dbname=" + name // a key=value DSN: the last setting wins
}

func (c *BenchCmd) printComparison(g *Globals, cmp *bench.Comparison) error {
	if c.JSON {
		return writeJSON(g.stdout, cmp)
	}
	m := cmp.Machine
	fmt.Fprintf(g.stdout, "%s against the peer, %d rounds, alternating, on %d cores, PostgreSQL %s, fsync=%s\n",
		cmp.Scenario, cmp.Rounds, m.Cores, m.PostgresVersion, m.Fsync)
	for _, p := range cmp.Points {
		s := p.Summary
		fmt.Fprintf(g.stdout, "  %-16s %s: ffd %.0f, peer %.0f, ratio (median of rounds) %.2f\n",
			p.Name, p.Figure, s["ffd_"+p.Figure], s["peer_"+p.Figure], s["ratio_"+p.Figure])
		if _, ok := s["ratio_db_us_per_execution"]; ok {
			fmt.Fprintf(g.stdout, "  %-16s database time per execution: ffd %.1f µs, peer %.1f µs, ratio %.2f\n",
				"", s["ffd_db_us_per_execution"], s["peer_db_us_per_execution"], s["ratio_db_us_per_execution"])
		}
		if _, ok := s["ffd_over_floor_"+p.Figure]; ok {
			fmt.Fprintf(g.stdout, "  %-16s floor %.0f: ffd/floor %.2f, peer/floor %.2f (medians of rounds)\n",
				"", s["floor_"+p.Figure], s["ffd_over_floor_"+p.Figure], s["peer_over_floor_"+p.Figure])
		}
		if _, ok := s["ffd_over_floor_db_us_per_execution"]; ok {
			fmt.Fprintf(g.stdout, "  %-16s floor database time per execution %.1f µs: ffd/floor %.2f, peer/floor %.2f\n",
				"", s["floor_db_us_per_execution"], s["ffd_over_floor_db_us_per_execution"], s["peer_over_floor_db_us_per_execution"])
		}
	}
	return nil
}

// BenchChildCmd is `ffd bench-child` (hidden): the memory scenario's
// daemon or worker process, its role and settings in the environment
// the bench set (bench.EnvRole).
type BenchChildCmd struct{}

// Run runs the child until SIGTERM; it exits the process.
func (c *BenchChildCmd) Run() error {
	if os.Getenv(bench.EnvRole) == "" {
		return fmt.Errorf("bench-child is started by ffd bench, with %s set", bench.EnvRole)
	}
	bench.RoleMain()
	return nil
}
