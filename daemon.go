package ffd

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/logging"
)

// Defaults of DaemonConfig (the same as `ffd run`'s).
const (
	DefaultDaemonCascadeWorkers = daemon.DefaultCascadeWorkers
	DefaultDaemonSweepInterval  = daemon.DefaultSweepInterval
	DefaultDaemonStopTimeout    = daemon.DefaultStopTimeout
	DefaultOutboxRetention      = daemon.DefaultOutboxRetention
	DefaultExecutionRetention   = daemon.DefaultExecutionRetention
	// KeepForever, as a retention, deletes nothing (any negative age
	// does the same).
	KeepForever time.Duration = -1
)

// ErrDaemonStarted is returned by Daemon.Start on a daemon already
// started.
var ErrDaemonStarted = daemon.ErrStarted

// DaemonConfig configures a daemon embedded in an application. Zero
// values take the defaults, which are `ffd run`'s.
type DaemonConfig struct {
	// Logger receives the daemon's logs. Default: Info and above to
	// stderr (JSON, or console on a terminal).
	Logger *zap.Logger
	// CascadeWorkers dispatch completion events concurrently. Default
	// DefaultDaemonCascadeWorkers (4).
	CascadeWorkers int
	// SweepInterval is the period of the fallback sweep that catches what
	// a lost notification left behind. Default DefaultDaemonSweepInterval
	// (1 s).
	SweepInterval time.Duration
	// StopTimeout bounds a graceful stop: work under way gets this long
	// to finish. Default DefaultDaemonStopTimeout (30 s).
	StopTimeout time.Duration
	// OutboxRetention deletes outbox events older than this once they
	// are dispatched and every registered consumer has read them. Default
	// DefaultOutboxRetention (7 days); KeepForever keeps them. (0 is
	// the default here; `ffd run` refuses 0 and spells forever
	// "forever", so neither reads the other's 0 as forever.)
	OutboxRetention time.Duration
	// ExecutionRetention deletes finished executions (with their
	// attempts) and finished flows (with their members, edges and groups)
	// this long after they finished, freeing their idempotency keys.
	// Default DefaultExecutionRetention (30 days); KeepForever keeps
	// them.
	ExecutionRetention time.Duration
	// NamespaceRetention overrides ExecutionRetention for the namespaces
	// it names; KeepForever keeps that namespace's. Default none.
	NamespaceRetention map[string]time.Duration
	// DeadLetterRetention keeps dead letters (ListDeadLetters) this long
	// after they ended, in every namespace, instead of their namespace's
	// retention; KeepForever keeps them until they are rerun. Default 0:
	// as other finished executions.
	DeadLetterRetention time.Duration
}

// Daemon is the daemon's work, run inside the application's process:
// it cascades completion events into the flows' next steps, cancels the
// losing siblings of satisfied groups, expires lapsed leases, attempt
// timeouts and deadlines, sweeps for anything a lost notification left
// behind, and applies outbox retention. Without a daemon, flows stall
// after their first steps (workers warn when that happens).
//
// Embedding is the simplest deployment: every application process may
// run one, and several daemons (embedded or `ffd run`) share one
// database safely: each event is dispatched exactly once. Use `ffd run`
// under systemd to run it on its own (docs/operations.md).
type Daemon struct {
	d *daemon.Daemon
}

// NewDaemon builds a daemon over pool. cfg may be nil for the defaults.
// The pool should carry the session guard (NewPool, ConfigurePool); the
// daemon opens one more connection of the same configuration for LISTEN.
func NewDaemon(pool *pgxpool.Pool, cfg *DaemonConfig) (*Daemon, error) {
	if pool == nil {
		return nil, errors.New("ffd: NewDaemon needs a pool")
	}
	var c DaemonConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = defaultLogger()
	}
	byNamespace := make(map[string]time.Duration, len(c.NamespaceRetention))
	for ns, age := range c.NamespaceRetention {
		byNamespace[ns] = max(age, 0) // the internal daemon's "forever" is 0
	}
	d, err := daemon.New(daemon.Config{
		Pool:                pool,
		ExecutionRetention:  keepOrDefault(c.ExecutionRetention, DefaultExecutionRetention),
		NamespaceRetention:  byNamespace,
		DeadLetterRetention: c.DeadLetterRetention,
		CascadeWorkers:      c.CascadeWorkers,
		SweepInterval:       c.SweepInterval,
		StopTimeout:         c.StopTimeout,
		Retention:           keepOrDefault(c.OutboxRetention, DefaultOutboxRetention),
		Logger:              c.Logger.Named("daemon"),
		// An application reports to systemd itself, if at all.
		Supervisor: daemon.NopSupervisor{},
	})
	if err != nil {
		return nil, err
	}
	return &Daemon{d: d}, nil
}

// Run runs the daemon until ctx ends, then stops it gracefully. It waits
// for the database at start-up while the database is unreachable, and
// returns an error only for what waiting cannot fix (a schema older or
// newer than this build, refused credentials).
func (d *Daemon) Run(ctx context.Context) error { return d.d.Run(ctx) }

// Start runs the daemon in the background and returns once it is ready
// (schema checked, listening, first sweep done). If the daemon fails
// first, Start returns its error; if ctx ends first, Start stops it and
// returns ctx's error. Once started it runs until Stop or until ctx ends.
func (d *Daemon) Start(ctx context.Context) error { return d.d.Start(ctx) }

// Stop stops a daemon started with Start and waits for it (up to
// DaemonConfig.StopTimeout for work under way), or until ctx ends: then
// it returns ctx's error, and the daemon still stops within its
// StopTimeout. Stopping a daemon that is not running is a no-op. Worker
// and Daemon share this shape: Start(ctx), then Stop(ctx).
func (d *Daemon) Stop(ctx context.Context) error { return d.d.Stop(ctx) }

// Ready reports whether the daemon is ready: schema checked, listening,
// first sweep done, and the database answering.
func (d *Daemon) Ready() bool { return d.d.Ready() }

// Registry holds the daemon's Prometheus metrics (the names `ffd run`
// serves on /metrics, docs/operations.md), for the application to serve,
// for example with promhttp.HandlerFor.
func (d *Daemon) Registry() *prometheus.Registry { return d.d.Metrics().Registry() }

// keepOrDefault maps a public retention (0: the default, negative:
// forever) to the internal daemon's (0: forever).
func keepOrDefault(age, def time.Duration) time.Duration {
	switch {
	case age == 0:
		return def
	case age < 0:
		return 0
	}
	return age
}

// defaultLogger is what ffd logs through when the application gives no
// logger: Info and above to stderr.
func defaultLogger() *zap.Logger {
	log, err := logging.New(os.Stderr, "info", logging.FormatAuto)
	if err != nil {
		return zap.NewNop() // a fixed, valid level and format: not reached
	}
	return log
}
