// Package daemon is `ffd run`: the listener, the cascade and sibling-cancel
// worker pools, the timeout worker, the fallback sweep, retention, the
// database watchdog, the gauge sampler and the admin HTTP server, each a
// component with Start and Stop, composed by Daemon.Run with systemd
// integration.
//
// Notifications make the daemon fast; the sweep makes it certain. Every
// piece of work is taken with SKIP LOCKED or re-checked under a row lock,
// so any number of daemons can run against one database and each unit of
// work is done once. A hint that does not fit a worker queue is dropped
// (and counted): the next sweep finds the work anyway.
package daemon

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

// Defaults for Config: internal/bound's, which `ffd run`'s flags take too.
const (
	DefaultCascadeWorkers = bound.DefaultCascadeWorkers
	DefaultSiblingWorkers = bound.DefaultSiblingWorkers
	DefaultQueueSize      = bound.DefaultQueueSize
	DefaultSweepInterval  = bound.DefaultSweepInterval
	DefaultSweepBatch     = bound.DefaultSweepBatch
	DefaultDispatchGrace  = bound.DefaultDispatchGrace
	// DefaultDispatchLockTimeout bounds each lock wait of a cascade
	// transaction (Config.DispatchLockTimeout).
	DefaultDispatchLockTimeout = bound.DefaultDispatchLockTimeout
	DefaultStopTimeout         = bound.DefaultStopTimeout
	DefaultAdminAddr           = "127.0.0.1:9464"
	DefaultSampleInterval      = bound.DefaultSampleInterval
	// DefaultStatisticsInterval is how often the daemon looks for tables
	// whose planner statistics say they are nearly empty while they fill
	// (Config.StatisticsInterval).
	DefaultStatisticsInterval = bound.DefaultStatisticsInterval
	DefaultTimerLimit         = 1000
	DefaultRetentionInterval  = bound.DefaultRetentionInterval
	DefaultScheduleInterval   = bound.DefaultScheduleInterval
	// DefaultOutboxRetention is how long `ffd run` and embedded daemons
	// keep dispatched, consumed outbox events.
	DefaultOutboxRetention = bound.DefaultOutboxRetention
	// DefaultExecutionRetention is how long `ffd run` and embedded
	// daemons keep finished executions and flows.
	DefaultExecutionRetention = bound.DefaultExecutionRetention
	// DefaultRetentionBatch bounds the rows one retention statement
	// deletes, so that each holds its locks briefly.
	DefaultRetentionBatch = 500
)

// Config configures a Daemon. Zero values take the defaults.
type Config struct {
	// Pool runs all work. Required.
	Pool *pgxpool.Pool
	// ListenConnConfig is the LISTEN connection. Default: the pool's.
	ListenConnConfig *pgx.ConnConfig
	// CascadeWorkers dispatch completion events by id. Default 4.
	CascadeWorkers int
	// SiblingWorkers drain pending cancel groups. Default 1.
	SiblingWorkers int
	// QueueSize bounds each worker queue; a full queue drops the hint.
	// Default 10000.
	QueueSize int
	// SweepInterval is the fallback sweep's period, jittered ±10%.
	// Default 1 s.
	SweepInterval time.Duration
	// SweepBatch bounds each batch the sweep takes. Default 500.
	SweepBatch int
	// DispatchGrace: the sweep leaves events younger than this to the
	// notified workers. Default 500 ms.
	DispatchGrace time.Duration
	// DispatchLockTimeout bounds each lock wait of a cascade transaction
	// and of a sibling cancellation. Past it the transaction's events are
	// dispatched one by one, and those of a flow another transaction holds
	// (a frozen process, a long cancel) wait for the sweep; a held group
	// of siblings goes to the back of its queue: one held flow delays only
	// itself.
	// Default DefaultDispatchLockTimeout (2 s).
	DispatchLockTimeout time.Duration
	// StopTimeout bounds a graceful stop. Default 30 s.
	StopTimeout time.Duration
	// AdminAddr serves /healthz, /readyz and /metrics; "" disables it.
	// Default: none (the CLI defaults it to DefaultAdminAddr).
	AdminAddr string
	// SampleInterval is how often the executions gauge is refreshed.
	// Default 15 s.
	SampleInterval time.Duration
	// StatisticsInterval is how often the ff_ tables' planner statistics
	// are checked, and refreshed (ANALYZE) where they say a table holds
	// under a quarter of its rows: a queue analyzed while drained would
	// otherwise be planned as empty until autovacuum analyzes it again.
	// Default DefaultStatisticsInterval (2 s).
	StatisticsInterval time.Duration
	// Retention deletes outbox events older than this that are dispatched
	// and behind every registered consumer; 0 disables it. Default 0 (the
	// CLI defaults it to DefaultOutboxRetention).
	Retention time.Duration
	// RetentionInterval is how often retention runs. Default
	// DefaultRetentionInterval (1 min).
	RetentionInterval time.Duration
	// ExecutionRetention deletes finished solo executions (with their
	// attempts), and finished flows (with their members, attempts, edges
	// and groups), this long after they finished; 0 keeps them forever.
	// Default 0 (the CLI and embedded daemons default it to
	// DefaultExecutionRetention).
	ExecutionRetention time.Duration
	// NamespaceRetention overrides ExecutionRetention for the namespaces
	// it names (0: keep that namespace's forever). Default none.
	NamespaceRetention map[string]time.Duration
	// DeadLetterRetention, when not 0, is how long dead letters (solo
	// executions that ended failed or expired and were not rerun) are
	// kept instead, in every namespace, so that operators can work them
	// (docs/intake.md); less than 0 keeps them forever. Default 0: as
	// other finished executions.
	DeadLetterRetention time.Duration
	// ScheduleInterval is how often due schedules are fired: a tick fires
	// up to this late. Default DefaultScheduleInterval (1 s).
	ScheduleInterval time.Duration
	// ConsumerIdleLimit: consumers that have not read for this long while
	// events wait are reported (logs and metrics). Default 24 h.
	ConsumerIdleLimit time.Duration
	// DisableListen runs on the sweep alone (tests of lost notifications).
	DisableListen bool
	// Logger. Default: none.
	Logger *zap.Logger
	// Metrics. Default: a fresh set.
	Metrics *Metrics
	// Supervisor is told the daemon's state (sd_notify). Default:
	// SystemdSupervisor.
	Supervisor Supervisor
	// Console, when set, is served at / by the admin server (ffd run
	// --console). Default: none.
	Console http.Handler
}

func (c *Config) normalize() error {
	if c.Pool == nil {
		return errors.New("daemon: a pool is required")
	}
	if c.ListenConnConfig == nil {
		c.ListenConnConfig = c.Pool.Config().ConnConfig
	}
	for _, err := range []error{
		bound.CascadeWorkers.Fill("CascadeWorkers", &c.CascadeWorkers),
		bound.SiblingWorkers.Fill("SiblingWorkers", &c.SiblingWorkers),
		bound.QueueSize.Fill("QueueSize", &c.QueueSize),
		bound.SweepBatch.Fill("SweepBatch", &c.SweepBatch),
		bound.SweepInterval.Fill("SweepInterval", &c.SweepInterval),
		bound.DispatchGrace.Fill("DispatchGrace", &c.DispatchGrace),
		bound.DispatchLockTimeout.Fill("DispatchLockTimeout", &c.DispatchLockTimeout),
		bound.StopTimeout.Fill("StopTimeout", &c.StopTimeout),
		bound.SampleInterval.Fill("SampleInterval", &c.SampleInterval),
		bound.StatisticsInterval.Fill("StatisticsInterval", &c.StatisticsInterval),
		bound.RetentionInterval.Fill("RetentionInterval", &c.RetentionInterval),
		bound.ScheduleInterval.Fill("ScheduleInterval", &c.ScheduleInterval),
		bound.ConsumerIdleLimit.Fill("ConsumerIdleLimit", &c.ConsumerIdleLimit),
	} {
		if err != nil {
			return err
		}
	}
	if err := bound.ExecutionRetention.Check("ExecutionRetention", c.ExecutionRetention); err != nil {
		return err
	}
	for ns, age := range c.NamespaceRetention {
		if err := leases.ValidateName("NamespaceRetention", ns); err != nil {
			return err
		}
		if err := bound.ExecutionRetention.Check("NamespaceRetention["+ns+"]", age); err != nil {
			return err
		}
	}
	if c.DeadLetterRetention > 0 {
		if err := bound.ExecutionRetention.Check("DeadLetterRetention", c.DeadLetterRetention); err != nil {
			return err
		}
	}
	if err := bound.OutboxRetention.Check("Retention", c.Retention); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Supervisor == nil {
		c.Supervisor = SystemdSupervisor{}
	}
	return nil
}

// env is what the components share.
type env struct {
	cfg     Config
	log     *zap.Logger
	m       *Metrics
	cascade *cascade.Dispatcher
	fanout  *listener.Fanout
	due     *dueLanes
	// work runs work already taken; it outlives a stop by up to
	// StopTimeout, so that in-flight transactions finish. Set by Run
	// before any component starts.
	work context.Context
}

// newFanout is the daemon's fan-out, counting what it drops.
func newFanout(m *Metrics, size int) *listener.Fanout {
	return listener.NewFanout(size, func(queue string) { m.droppedHints.WithLabelValues(queue).Inc() })
}

// component is a part of the daemon, with the lifecycle every ffd
// component has: Start(ctx) returns once it runs; Stop(ctx) returns once
// it has stopped, or with ctx's error when ctx ends first.
type component interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Daemon is one running ffd daemon.
type Daemon struct {
	e        *env
	listener *listener.Listener // nil with DisableListen
	admin    *adminServer       // nil without AdminAddr
	sweeper  *sweeper
	watchdog *watchdog
	// workers start once the daemon is ready, in this order, and stop in
	// the reverse one.
	workers []component

	firstConnect chan struct{}
	connectOnce  sync.Once
	ready        atomic.Bool
	becameReady  chan struct{} // closed when the daemon is first ready
	readyOnce    sync.Once
	bg           background // Start and Stop
}

// adminStopTimeout is how long the admin server's in-flight requests get
// when the daemon stops.
const adminStopTimeout = 2 * time.Second

// ListenApplicationName is the application_name of the daemon's LISTEN
// connection, to find it in pg_stat_activity.
const ListenApplicationName = "ffd-daemon"

// New validates cfg and builds a daemon; Run runs it in the foreground,
// Start in the background.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	e := &env{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, cascade: cascade.New(cfg.Pool, cfg.Metrics),
		fanout: newFanout(cfg.Metrics, cfg.QueueSize)}
	e.cascade.SetLockTimeout(cfg.DispatchLockTimeout)
	e.due = &dueLanes{e: e}
	d := &Daemon{e: e, sweeper: &sweeper{e: e}, watchdog: &watchdog{e: e}, firstConnect: make(chan struct{}), becameReady: make(chan struct{})}
	d.workers = []component{&cascadePool{e: e}, &siblingPool{e: e}, newTimerWorker(e), d.sweeper, d.watchdog, &sampler{e: e}, &statistician{e: e}, &retainer{e: e}, &scheduler{e: e}, &triggerer{e: e}, &linker{e: e}}
	if cfg.AdminAddr != "" {
		d.admin = &adminServer{addr: cfg.AdminAddr, notReady: d.NotReady, m: cfg.Metrics, extra: cfg.Console}
	}
	if !cfg.DisableListen {
		l, err := listener.New(listener.Config{
			ConnConfig:      cfg.ListenConnConfig,
			ApplicationName: ListenApplicationName,
			Topics:          []listener.Topic{listener.Completion, listener.Lease, listener.Event},
			Handle:          e.fanout.Handle,
			OnConnect: func(ctx context.Context, reconnect bool) {
				if reconnect {
					e.m.reconnects.Inc()
				}
				e.fanout.RequestSweep(true)
				d.connectOnce.Do(func() { close(d.firstConnect) })
			},
			Logger: cfg.Logger.Named("listener"),
		})
		if err != nil {
			return nil, err
		}
		d.listener = l
	}
	d.e.m.readyBy(d.Ready)
	return d, nil
}

// Metrics are the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.e.m }

// Ready reports whether the daemon is ready: schema checked, LISTEN up
// (unless disabled), first sweep done, the database answering, and no
// sweep step failing.
func (d *Daemon) Ready() bool { return d.NotReady() == "" }

// NotReady says why the daemon is not ready, "" when it is: what /readyz
// answers with its 503.
func (d *Daemon) NotReady() string {
	switch {
	case !d.ready.Load():
		return "starting or stopping"
	case !d.watchdog.dbOK.Load():
		return "the database does not answer"
	case d.listener != nil && !d.listener.Connected():
		return "LISTEN is down"
	}
	if failing := d.sweeper.Failing(); len(failing) > 0 {
		return "sweep steps failing " + strconv.Itoa(sweepFailLimit) + " sweeps in a row: " + strings.Join(failing, ", ")
	}
	return ""
}

// Run runs the daemon until ctx ends, then stops gracefully: it stops
// listening and taking work, lets in-flight transactions finish (bounded
// by StopTimeout), and returns nil. At start-up it waits, retrying with
// backoff, while the database is unreachable or restarting (a service
// started before its database, or restarted while it crash-restarts, comes
// up with it instead of exhausting its supervisor's restart limit);
// permanent errors (a schema mismatch, bad credentials, a missing
// database) are returned at once.
func (d *Daemon) Run(ctx context.Context) error {
	if err := d.waitForDatabase(ctx); err != nil || ctx.Err() != nil {
		return err // nil when stopped while starting: nothing to finish
	}
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	d.e.work = work
	if d.admin != nil {
		if err := d.admin.Start(ctx); err != nil {
			return err
		}
		// Whichever way Run returns, the admin server is gone by then
		// (in-flight requests get 2 s).
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adminStopTimeout)
			defer cancel()
			_ = d.admin.Stop(sctx)
		}()
		d.e.log.Info("admin server listening", zap.String("addr", d.admin.Addr()))
	}
	if d.listener != nil {
		if err := d.listener.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = d.listener.Stop(context.WithoutCancel(ctx)) }()
	} else {
		d.connectOnce.Do(func() { close(d.firstConnect) })
	}
	select {
	case <-d.firstConnect:
	case <-ctx.Done():
		return nil
	}
	// The first sweep, then READY.
	d.sweeper.sweep(work, true)
	d.ready.Store(true)
	d.readyOnce.Do(func() { close(d.becameReady) })
	d.e.cfg.Supervisor.Notify("READY=1\nSTATUS=ready: listening and sweeping")
	d.e.log.Info("ffd daemon ready", zap.Int("cascade_workers", d.e.cfg.CascadeWorkers), zap.Duration("sweep_interval", d.e.cfg.SweepInterval), zap.Bool("listen", d.listener != nil))
	for _, c := range d.workers {
		if err := c.Start(ctx); err != nil {
			d.stop(stopWork)
			return err
		}
	}
	<-ctx.Done()
	d.stop(stopWork)
	return nil
}

// waitForDatabase checks the schema, retrying while the database is
// unavailable, and places the due-lane watermark.
func (d *Daemon) waitForDatabase(ctx context.Context) error {
	err := outbox.RetryTransient(ctx, d.e.log, "database unavailable at start-up; waiting for it", func() error {
		err := schema.Check(ctx, d.e.cfg.Pool)
		if err == nil {
			err = d.e.cfg.Pool.QueryRow(ctx, `SELECT now() - interval '5 minutes'`).Scan(&d.e.due.since)
		}
		if err != nil && outbox.Transient(err) {
			d.e.cfg.Supervisor.Notify("STATUS=waiting for the database")
		}
		return err
	})
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	d.watchdog.dbOK.Store(true)
	d.e.cfg.Supervisor.Notify("STATUS=starting: schema verified")
	d.checkAPI(ctx)
	d.checkShardReads(ctx)
	return nil
}

// checkShardReads warns, on a distributed Postgres, when a read across
// the shards may open more than one connection to each node: the
// setting `ffd migrate distribution` prints (store.CitusSettings) is
// missing, and every sweep step, timer reload and lane sample of a new
// session opens up to that many backends per node (docs/scaling.md,
// "Settings").
func (d *Daemon) checkShardReads(ctx context.Context) {
	dist, err := store.Distributed(ctx, d.e.cfg.Pool)
	if err != nil || !dist {
		return
	}
	n, known, err := store.ShardReadConnections(ctx, d.e.cfg.Pool)
	switch {
	case err != nil:
		d.e.log.Warn("could not read how many connections a read across the shards opens", zap.Error(err))
	case known && n > 1:
		d.e.log.Warn("a read across the shards opens up to this many connections to each node: run the ALTER DATABASE that ffd migrate distribution prints",
			zap.Int("max_adaptive_executor_pool_size", n))
	}
}

// checkAPI warns when the SQL API's functions (docs/sql.md) are not this
// binary's: a binary upgraded without `ffd migrate up` leaves the
// previous one's, which may run statements this one no longer does.
func (d *Daemon) checkAPI(ctx context.Context) {
	current, err := schema.APICurrent(ctx, d.e.cfg.Pool)
	switch {
	case err != nil:
		d.e.log.Warn("could not read whether the SQL API is this binary's", zap.Error(err))
	case !current:
		d.e.log.Warn("the SQL API's functions are missing or another binary's: run ffd migrate up")
	}
}

// stop stops listening, then every worker in reverse start order, letting
// work under way finish for up to StopTimeout before cancelling it.
func (d *Daemon) stop(stopWork context.CancelFunc) {
	d.e.log.Info("stopping: no new work; finishing in-flight transactions", zap.Duration("stop_timeout", d.e.cfg.StopTimeout))
	d.e.cfg.Supervisor.Notify("STOPPING=1\nSTATUS=stopping")
	d.ready.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), d.e.cfg.StopTimeout)
	defer cancel()
	if d.listener != nil {
		_ = d.listener.Stop(ctx)
	}
	stopAll := func(ctx context.Context) error {
		for i := len(d.workers) - 1; i >= 0; i-- {
			if err := d.workers[i].Stop(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	if stopAll(ctx) != nil {
		d.e.log.Warn("stop timeout reached; cancelling in-flight work (it rolls back and the next daemon redoes it)")
		stopWork()
		_ = stopAll(context.Background()) // prompt: their work is cancelled
	}
	d.e.log.Info("ffd daemon stopped")
}
