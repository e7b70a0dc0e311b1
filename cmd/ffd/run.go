package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/daemon"
)

// RunCmd is `ffd run`: the daemon.
type RunCmd struct {
	DaemonFlags
}

// DaemonFlags are the daemon's settings; `ffd dev` and `ffd demo` embed
// them too.
type DaemonFlags struct {
	ListenerURL    string        `name:"listener-url" env:"FFD_LISTENER_URL" help:"Connection URL for the dedicated LISTEN connection (default: the database URL). Point it past any transaction pooler."`
	AdminAddr      string        `name:"admin-addr" env:"FFD_ADMIN_ADDR" default:"127.0.0.1:9464" help:"Address of /healthz, /readyz and /metrics; empty disables."`
	PoolMaxConns   int32         `name:"pool-max-conns" env:"FFD_POOL_MAX_CONNS" default:"10" help:"Maximum pooled connections for work."`
	CascadeWorkers int           `name:"cascade-workers" env:"FFD_CASCADE_WORKERS" default:"4" help:"Workers dispatching completion events."`
	SiblingWorkers int           `name:"sibling-workers" env:"FFD_SIBLING_WORKERS" default:"1" help:"Workers cancelling losing siblings."`
	QueueSize      int           `name:"queue-size" env:"FFD_QUEUE_SIZE" default:"10000" help:"Bound of each worker queue; hints beyond it are dropped and swept up."`
	SweepInterval  time.Duration `name:"sweep-interval" env:"FFD_SWEEP_INTERVAL" default:"1s" help:"Period of the fallback sweep (jittered ±10%)."`
	SweepBatch     int           `name:"sweep-batch" env:"FFD_SWEEP_BATCH" default:"500" help:"Rows each sweep batch takes."`
	StopTimeout    time.Duration `name:"stop-timeout" env:"FFD_STOP_TIMEOUT" default:"30s" help:"How long a graceful stop may take."`
	Retention      time.Duration `name:"retention" env:"FFD_RETENTION" default:"168h" help:"Delete outbox events older than this once dispatched and consumed by every named consumer; 0 disables."`
	ConsumerIdle   time.Duration `name:"consumer-idle-limit" env:"FFD_CONSUMER_IDLE_LIMIT" default:"24h" help:"Report named consumers idle this long while events wait for them."`
}

func (f *DaemonFlags) validate() error {
	switch {
	case f.PoolMaxConns < 2 || f.PoolMaxConns > 1000:
		return fmt.Errorf("--pool-max-conns %d: want 2..1000", f.PoolMaxConns)
	case f.CascadeWorkers < 1 || f.CascadeWorkers > 1000:
		return fmt.Errorf("--cascade-workers %d: want 1..1000", f.CascadeWorkers)
	case f.SiblingWorkers < 1 || f.SiblingWorkers > 1000:
		return fmt.Errorf("--sibling-workers %d: want 1..1000", f.SiblingWorkers)
	case f.QueueSize < 1 || f.QueueSize > 10_000_000:
		return fmt.Errorf("--queue-size %d: want 1..10000000", f.QueueSize)
	case f.SweepInterval < 10*time.Millisecond || f.SweepInterval > time.Hour:
		return fmt.Errorf("--sweep-interval %s: want 10ms..1h", f.SweepInterval)
	case f.SweepBatch < 1 || f.SweepBatch > 100000:
		return fmt.Errorf("--sweep-batch %d: want 1..100000", f.SweepBatch)
	case f.StopTimeout < 100*time.Millisecond || f.StopTimeout > time.Hour:
		return fmt.Errorf("--stop-timeout %s: want 100ms..1h", f.StopTimeout)
	case f.Retention < 0 || f.Retention > 10*365*24*time.Hour:
		return fmt.Errorf("--retention %s: want 0 (off) up to 87600h", f.Retention)
	case f.ConsumerIdle < time.Second || f.ConsumerIdle > 365*24*time.Hour:
		return fmt.Errorf("--consumer-idle-limit %s: want 1s..8760h", f.ConsumerIdle)
	}
	return nil
}

// config builds the daemon configuration over databaseURL.
func (f *DaemonFlags) config(ctx context.Context, g *Globals, databaseURL string) (daemon.Config, *pgxpool.Pool, error) {
	if err := f.validate(); err != nil {
		return daemon.Config{}, nil, err
	}
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return daemon.Config{}, nil, fmt.Errorf("database URL: %w", err)
	}
	pcfg.MaxConns = f.PoolMaxConns
	listen := pcfg.ConnConfig
	if f.ListenerURL != "" {
		if listen, err = pgx.ParseConfig(f.ListenerURL); err != nil {
			return daemon.Config{}, nil, fmt.Errorf("listener URL: %w", err)
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return daemon.Config{}, nil, fmt.Errorf("connect to database: %w", err)
	}
	return daemon.Config{
		Pool: pool, ListenConnConfig: listen, CascadeWorkers: f.CascadeWorkers, SiblingWorkers: f.SiblingWorkers,
		QueueSize: f.QueueSize, SweepInterval: f.SweepInterval, SweepBatch: f.SweepBatch, StopTimeout: f.StopTimeout,
		AdminAddr: f.AdminAddr, Retention: f.Retention, ConsumerIdleLimit: f.ConsumerIdle, Logger: g.log,
	}, pool, nil
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
