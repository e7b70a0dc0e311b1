package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/console"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/session"
)

// RunCmd is `ffd run`: the daemon.
type RunCmd struct {
	DaemonFlags
}

// DaemonFlags are the daemon's settings; `ffd dev` and `ffd demo` embed
// them too.
type DaemonFlags struct {
	ListenerURL    string        `name:"listener-url" env:"FFD_LISTENER_URL" help:"Connection URL for the dedicated LISTEN connection (default: the database URL). Point it past any transaction pooler."`
	AdminAddr      string        `name:"admin-addr" env:"FFD_ADMIN_ADDR" default:"${admin_addr}" help:"Address of /healthz, /readyz and /metrics; empty disables."`
	PoolMaxConns   int32         `name:"pool-max-conns" env:"FFD_POOL_MAX_CONNS" default:"${pool_max_conns}" help:"Maximum pooled connections for work."`
	CascadeWorkers int           `name:"cascade-workers" env:"FFD_CASCADE_WORKERS" default:"${cascade_workers}" help:"Workers dispatching completion events."`
	SiblingWorkers int           `name:"sibling-workers" env:"FFD_SIBLING_WORKERS" default:"${sibling_workers}" help:"Workers cancelling losing siblings."`
	QueueSize      int           `name:"queue-size" env:"FFD_QUEUE_SIZE" default:"${queue_size}" help:"Bound of each worker queue; hints beyond it are dropped and swept up."`
	SweepInterval  time.Duration `name:"sweep-interval" env:"FFD_SWEEP_INTERVAL" default:"${sweep_interval}" help:"Period of the fallback sweep (jittered ±10%)."`
	SweepBatch     int           `name:"sweep-batch" env:"FFD_SWEEP_BATCH" default:"${sweep_batch}" help:"Rows each sweep batch takes."`
	StopTimeout    time.Duration `name:"stop-timeout" env:"FFD_STOP_TIMEOUT" default:"${stop_timeout}" help:"How long a graceful stop may take."`
	Retention      retention     `name:"retention" env:"FFD_RETENTION" default:"${outbox_retention}" help:"Delete outbox events older than this once dispatched and consumed by every named consumer; forever keeps them."`
	Console        bool          `name:"console" env:"FFD_CONSOLE" help:"Serve the web console on the admin address too."`
	WorkerAPI      bool          `name:"worker-api" env:"FFD_WORKER_API" help:"Serve the worker protocol (docs/worker-protocol.md) on the admin address too, for handlers in other languages; needs --worker-token-file."`
	WorkerTokens   string        `name:"worker-token-file" env:"FFD_WORKER_TOKEN_FILE" help:"File of the worker protocol's bearer tokens, one per line (blank lines and # comments ignored)."`
	ConsumerIdle   time.Duration `name:"consumer-idle-limit" env:"FFD_CONSUMER_IDLE_LIMIT" default:"${consumer_idle_limit}" help:"Report named consumers idle this long while events wait for them."`
	// Retention of finished work (internal/store.Ages).
	ExecutionRetention  retention           `name:"execution-retention" env:"FFD_EXECUTION_RETENTION" default:"${execution_retention}" help:"Delete finished executions, and finished flows with their members, edges and groups, this long after they finished; forever keeps them."`
	DeadLetterRetention retention           `name:"dead-letter-retention" env:"FFD_DEAD_LETTER_RETENTION" help:"Keep dead letters (executions that ended failed or expired and were not rerun) this long instead, in every namespace; forever keeps them. Default: as --execution-retention."`
	NamespaceRetention  namespaceRetentions `name:"namespace-retention" env:"FFD_NAMESPACE_RETENTION" placeholder:"NS=AGE;..." help:"Per-namespace overrides of --execution-retention, as namespace=age;... (an age, or forever)."`
}

// Validate checks every flag against the range the daemon accepts
// (internal/bound), before anything connects; kong calls it after parsing.
func (f *DaemonFlags) Validate() error {
	return firstError(
		bound.PoolMaxConns.Check("--pool-max-conns", int(f.PoolMaxConns)),
		bound.CascadeWorkers.Check("--cascade-workers", f.CascadeWorkers),
		bound.SiblingWorkers.Check("--sibling-workers", f.SiblingWorkers),
		bound.QueueSize.Check("--queue-size", f.QueueSize),
		bound.SweepInterval.Check("--sweep-interval", f.SweepInterval),
		bound.SweepBatch.Check("--sweep-batch", f.SweepBatch),
		bound.StopTimeout.Check("--stop-timeout", f.StopTimeout),
		f.Retention.check("--retention"),
		f.ExecutionRetention.check("--execution-retention"),
		f.DeadLetterRetention.check("--dead-letter-retention"),
		namespaceRetention(f.NamespaceRetention),
		bound.ConsumerIdleLimit.Check("--consumer-idle-limit", f.ConsumerIdle),
	)
}

// firstError returns the first non-nil error.
func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// config builds the daemon configuration over databaseURL.
func (f *DaemonFlags) config(ctx context.Context, g *Globals, databaseURL string) (daemon.Config, *pgxpool.Pool, error) {
	if err := f.Validate(); err != nil {
		return daemon.Config{}, nil, err
	}
	pcfg, err := g.poolConfig(databaseURL)
	if err != nil {
		return daemon.Config{}, nil, err
	}
	pcfg.MaxConns = f.PoolMaxConns
	listen := pcfg.ConnConfig
	if f.ListenerURL != "" {
		if listen, err = pgx.ParseConfig(f.ListenerURL); err != nil {
			return daemon.Config{}, nil, fmt.Errorf("listener URL: %w", err)
		}
		session.Apply(g.session(), listen)
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return daemon.Config{}, nil, fmt.Errorf("connect to database: %w", err)
	}
	cfg := daemon.Config{
		Pool: pool, ListenConnConfig: listen, CascadeWorkers: f.CascadeWorkers, SiblingWorkers: f.SiblingWorkers,
		QueueSize: f.QueueSize, SweepInterval: f.SweepInterval, SweepBatch: f.SweepBatch, StopTimeout: f.StopTimeout,
		AdminAddr: f.AdminAddr, Retention: f.Retention.internal(), ConsumerIdleLimit: f.ConsumerIdle, Logger: g.log,
		ExecutionRetention: f.ExecutionRetention.internal(), DeadLetterRetention: f.DeadLetterRetention.dead(),
	}
	if len(f.NamespaceRetention) > 0 {
		cfg.NamespaceRetention = make(map[string]time.Duration, len(f.NamespaceRetention))
		for ns, r := range f.NamespaceRetention {
			cfg.NamespaceRetention[ns] = r.internal()
		}
	}
	if f.Console {
		if f.AdminAddr == "" {
			pool.Close()
			return daemon.Config{}, nil, errors.New("--console needs --admin-addr")
		}
		con, err := console.New(console.Config{Pool: pool, Logger: g.log.Named("console"), Auth: consoleAuth()})
		if err != nil {
			pool.Close()
			return daemon.Config{}, nil, err
		}
		g.closes = append(g.closes, con.Close)
		cfg.Console = con
	}
	if f.WorkerAPI {
		if err := f.mountWorkerAPI(g, pool, &cfg); err != nil {
			pool.Close()
			return daemon.Config{}, nil, err
		}
	}
	return cfg, pool, nil
}

// mountWorkerAPI serves the worker protocol under ffd.WorkerAPIPrefix on
// the admin address, beside the console when it is on.
func (f *DaemonFlags) mountWorkerAPI(g *Globals, pool *pgxpool.Pool, cfg *daemon.Config) error {
	if f.AdminAddr == "" {
		return errors.New("--worker-api needs --admin-addr")
	}
	if f.WorkerTokens == "" {
		return errors.New("--worker-api needs --worker-token-file")
	}
	tokens, err := readTokens(f.WorkerTokens)
	if err != nil {
		return err
	}
	c, err := ffd.NewClient(pool, &ffd.Config{Logger: g.log.Named("worker-api")})
	if err != nil {
		return err
	}
	if cfg.Metrics == nil {
		cfg.Metrics = daemon.NewMetrics() // served on /metrics with the protocol's own
	}
	api, err := ffd.NewWorkerAPI(c, ffd.WorkerAPIConfig{Tokens: tokens, Logger: g.log.Named("worker-api"), Registerer: cfg.Metrics.Registry()})
	if err != nil {
		return fmt.Errorf("--worker-token-file %s: %w", f.WorkerTokens, err)
	}
	g.closes = append(g.closes, func() { _ = api.Close() })
	mux := http.NewServeMux()
	mux.Handle(ffd.WorkerAPIPrefix, api)
	if cfg.Console != nil {
		mux.Handle("/", cfg.Console)
	}
	cfg.Console = mux
	return nil
}

// readTokens reads a token file: one token per line, blank lines and
// lines starting with # ignored.
func readTokens(name string) ([]string, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("--worker-token-file: %w", err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if t := strings.TrimSpace(line); t != "" && !strings.HasPrefix(t, "#") {
			out = append(out, t)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--worker-token-file %s: no token in it", name)
	}
	return out, nil
}

// namespaceRetention checks --namespace-retention's names and ages.
func namespaceRetention(m namespaceRetentions) error {
	for ns, age := range m {
		if err := leases.ValidateName("--namespace-retention", ns); err != nil {
			return err
		}
		if err := age.check("--namespace-retention " + ns); err != nil {
			return err
		}
	}
	return nil
}

// Run runs the daemon until SIGTERM or SIGINT.
func (c *RunCmd) Run(ctx context.Context, g *Globals) error {
	if g.DatabaseURL == "" {
		return errNoDatabase
	}
	cfg, pool, err := c.config(ctx, g, g.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	d, err := daemon.New(cfg)
	if err != nil {
		return err
	}
	return d.Run(ctx)
}
