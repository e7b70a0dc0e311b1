// Package daemon is `ffd run`: the listener, the cascade and sibling-cancel
// worker pools, the timeout worker, the fallback sweep, the admin HTTP
// server and systemd integration, wired together.
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
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

// Defaults for Config.
const (
	DefaultCascadeWorkers    = 4
	DefaultSiblingWorkers    = 1
	DefaultQueueSize         = 10000
	DefaultSweepInterval     = time.Second
	DefaultSweepBatch        = 500
	DefaultDispatchGrace     = 500 * time.Millisecond
	DefaultStopTimeout       = 30 * time.Second
	DefaultAdminAddr         = "127.0.0.1:9464"
	DefaultSampleInterval    = 15 * time.Second
	DefaultTimerLimit        = 1000
	DefaultRetentionInterval = time.Minute
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
	// StopTimeout bounds a graceful stop. Default 30 s.
	StopTimeout time.Duration
	// AdminAddr serves /healthz, /readyz and /metrics; "" disables it.
	// Default: none (the CLI defaults it to DefaultAdminAddr).
	AdminAddr string
	// SampleInterval is how often the executions gauge is refreshed.
	// Default 15 s.
	SampleInterval time.Duration
	// Retention deletes outbox events older than this that are dispatched
	// and behind every registered consumer; 0 disables it. Default 0 (the
	// CLI defaults it to outbox.DefaultRetention).
	Retention time.Duration
	// RetentionInterval is how often retention runs. Default
	// DefaultRetentionInterval (1 min).
	RetentionInterval time.Duration
	// ConsumerIdleLimit: consumers that have not read for this long while
	// events wait are reported (logs and metrics). Default 24 h.
	ConsumerIdleLimit time.Duration
	// DisableListen runs on the sweep alone (tests of lost notifications).
	DisableListen bool
	// Logger. Default: none.
	Logger *zap.Logger
	// Metrics. Default: a fresh set.
	Metrics *Metrics
	// Notifier reports to systemd. Default: SystemdNotifier.
	Notifier Notifier
}

func (c *Config) normalize() error {
	if c.Pool == nil {
		return errors.New("daemon: a pool is required")
	}
	if c.ListenConnConfig == nil {
		c.ListenConnConfig = c.Pool.Config().ConnConfig
	}
	for _, err := range []error{
		bound.CascadeWorkers.Fill("CascadeWorkers", &c.CascadeWorkers, DefaultCascadeWorkers),
		bound.SiblingWorkers.Fill("SiblingWorkers", &c.SiblingWorkers, DefaultSiblingWorkers),
		bound.QueueSize.Fill("QueueSize", &c.QueueSize, DefaultQueueSize),
		bound.SweepBatch.Fill("SweepBatch", &c.SweepBatch, DefaultSweepBatch),
		bound.SweepInterval.Fill("SweepInterval", &c.SweepInterval, DefaultSweepInterval),
		bound.DispatchGrace.Fill("DispatchGrace", &c.DispatchGrace, DefaultDispatchGrace),
		bound.StopTimeout.Fill("StopTimeout", &c.StopTimeout, DefaultStopTimeout),
		bound.SampleInterval.Fill("SampleInterval", &c.SampleInterval, DefaultSampleInterval),
		bound.RetentionInterval.Fill("RetentionInterval", &c.RetentionInterval, DefaultRetentionInterval),
		bound.ConsumerIdleLimit.Fill("ConsumerIdleLimit", &c.ConsumerIdleLimit, outbox.DefaultIdleConsumerAge),
	} {
		if err != nil {
			return err
		}
	}
	if err := bound.Retention.Check("Retention", c.Retention); err != nil {
		return err
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics()
	}
	if c.Notifier == nil {
		c.Notifier = SystemdNotifier{}
	}
	return nil
}

// Daemon is one running ffd daemon.
type Daemon struct {
	cfg      Config
	log      *zap.Logger
	m        *Metrics
	cascade  *cascade.Dispatcher
	listener *listener.Listener
	timers   *timerWorker

	events   chan int64
	siblings chan struct{}
	leaseIDs chan int64
	sweepNow chan bool // true: right after a (re)connect, no grace

	firstConnect chan struct{}
	connectOnce  sync.Once

	dueSince   time.Time // sweep's watermark for due lanes
	ready      atomic.Bool
	dbOK       atomic.Bool
	sweepMu    sync.Mutex
	sweepCount atomic.Int64
}

// New validates cfg and builds a daemon; Run starts it.
func New(cfg Config) (*Daemon, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	d := &Daemon{
		cfg:      cfg,
		log:      cfg.Logger,
		m:        cfg.Metrics,
		cascade:  cascade.New(cfg.Pool, cfg.Metrics),
		events:   make(chan int64, cfg.QueueSize),
		siblings: make(chan struct{}, 1),
		leaseIDs: make(chan int64, cfg.QueueSize),
		sweepNow: make(chan bool, 1),

		firstConnect: make(chan struct{}),
	}
	d.timers = newTimerWorker(d)
	if !cfg.DisableListen {
		l, err := listener.New(listener.Config{
			ConnConfig: cfg.ListenConnConfig,
			Handle:     d.handle,
			OnConnect: func(ctx context.Context, reconnect bool) {
				if reconnect {
					d.m.reconnects.Inc()
				}
				d.requestSweep(true)
				d.connectOnce.Do(func() { close(d.firstConnect) })
			},
			Logger: cfg.Logger.Named("listener"),
		})
		if err != nil {
			return nil, err
		}
		d.listener = l
	}
	return d, nil
}

// Metrics are the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.m }

// Listener is the LISTEN loop (nil with DisableListen).
func (d *Daemon) Listener() *listener.Listener { return d.listener }

// Ready reports whether the daemon is ready: schema checked, LISTEN up
// (unless disabled), first sweep done, and the database answering.
func (d *Daemon) Ready() bool {
	return d.ready.Load() && d.dbOK.Load() && (d.listener == nil || d.listener.Connected())
}

// handle fans a notification out without ever blocking the listener.
func (d *Daemon) handle(n *pgconn.Notification) {
	queue, name := d.events, "cascade"
	switch n.Channel {
	case store.ChannelCompletion:
	case store.ChannelLease:
		queue, name = d.leaseIDs, "timeout"
	default:
		return
	}
	lo, hi, ok := parseIDRange(n.Payload)
	if !ok {
		return // an empty payload: nothing for the daemon (migration 00004)
	}
	if hi-lo >= maxHintRange {
		// A range this wide is rare (a huge statement interleaved with
		// others); the sweep finds its events without expanding it.
		d.m.droppedHints.WithLabelValues(name).Inc()
		d.requestSweep(false)
		return
	}
	for id := lo; id <= hi; id++ {
		select {
		case queue <- id:
		default:
			d.m.droppedHints.WithLabelValues(name).Inc()
			return
		}
	}
}

// maxHintRange bounds how many ids one notification's range is expanded
// into.
const maxHintRange = 10000

// parseIDRange reads a notification payload: "id" or "lo-hi" (one per
// statement, migration 00005). Ids in the range that are not the daemon's
// concern (another table's, dispatched already) are filtered by the
// queries they feed.
func parseIDRange(payload string) (lo, hi int64, ok bool) {
	a, b, isRange := strings.Cut(payload, "-")
	lo, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	if !isRange {
		return lo, lo, true
	}
	hi, err = strconv.ParseInt(b, 10, 64)
	if err != nil || hi < lo {
		return 0, 0, false
	}
	return lo, hi, true
}

func (d *Daemon) requestSweep(afterConnect bool) {
	select {
	case d.sweepNow <- afterConnect:
	default:
		if afterConnect {
			// A sweep is already requested; make sure it is the full kind.
			select {
			case <-d.sweepNow:
			default:
			}
			select {
			case d.sweepNow <- true:
			default:
			}
		}
	}
}

// Run runs the daemon until ctx ends, then stops gracefully: it stops
// listening and sweeping, lets in-flight transactions finish (bounded by
// StopTimeout), and returns nil. At start-up it waits, retrying with
// backoff, while the database is unreachable or restarting (a service
// started before its database, or restarted while it crash-restarts, comes
// up with it instead of exhausting its supervisor's restart limit);
// permanent errors (a schema mismatch, bad credentials, a missing
// database) are returned at once.
func (d *Daemon) Run(ctx context.Context) error {
	err := outbox.RetryTransient(ctx, d.log, "database unavailable at start-up; waiting for it", func() error {
		err := schema.Check(ctx, d.cfg.Pool)
		if err == nil {
			err = d.cfg.Pool.QueryRow(ctx, `SELECT now() - interval '5 minutes'`).Scan(&d.dueSince)
		}
		if err != nil && outbox.Transient(err) {
			d.cfg.Notifier.Notify("STATUS=waiting for the database")
		}
		return err
	})
	if ctx.Err() != nil {
		return nil // stopped while starting: nothing to finish
	}
	if err != nil {
		return err
	}
	d.dbOK.Store(true)
	d.cfg.Notifier.Notify("STATUS=starting: schema verified")

	// Work runs on a context that outlives ctx by up to StopTimeout, so
	// that in-flight transactions finish instead of being cut.
	workCtx, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()

	if d.cfg.AdminAddr != "" {
		admin, err := startAdmin(d, d.cfg.AdminAddr)
		if err != nil {
			return err
		}
		// Whichever way Run returns, the admin server is gone by then.
		defer admin.Close()
		d.log.Info("admin server listening", zap.String("addr", admin.Addr()))
	}

	var loops conc.WaitGroup
	listenCtx, stopListen := context.WithCancel(ctx)
	defer stopListen()
	if d.listener != nil {
		loops.Go(func() { d.listener.Run(listenCtx) })
	} else {
		d.connectOnce.Do(func() { close(d.firstConnect) })
	}
	select {
	case <-d.firstConnect:
	case <-ctx.Done():
		loops.Wait()
		return nil
	}
	// The first sweep, then READY.
	d.sweep(workCtx, true)
	d.ready.Store(true)
	d.cfg.Notifier.Notify("READY=1\nSTATUS=ready: listening and sweeping")
	d.log.Info("ffd daemon ready", zap.Int("cascade_workers", d.cfg.CascadeWorkers), zap.Duration("sweep_interval", d.cfg.SweepInterval), zap.Bool("listen", d.listener != nil))

	var workers conc.WaitGroup
	for range d.cfg.CascadeWorkers {
		workers.Go(func() { d.cascadeWorker(ctx, workCtx) })
	}
	for range d.cfg.SiblingWorkers {
		workers.Go(func() { d.siblingWorker(ctx, workCtx) })
	}
	workers.Go(func() { d.timers.run(ctx, workCtx) })
	workers.Go(func() { d.sweepLoop(ctx, workCtx) })
	workers.Go(func() { d.watchdog(ctx) })
	workers.Go(func() { d.sampleLoop(ctx, workCtx) })
	workers.Go(func() { d.retentionLoop(ctx, workCtx) })

	<-ctx.Done()
	d.log.Info("stopping: no new work; finishing in-flight transactions", zap.Duration("stop_timeout", d.cfg.StopTimeout))
	d.cfg.Notifier.Notify("STOPPING=1\nSTATUS=stopping")
	d.ready.Store(false)
	stopListen()
	done := make(chan struct{})
	go func() {
		loops.Wait()
		workers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d.cfg.StopTimeout):
		d.log.Warn("stop timeout reached; cancelling in-flight work (it rolls back and the next daemon redoes it)")
		stopWork()
		<-done
	}
	d.log.Info("ffd daemon stopped")
	return nil
}

// maxDispatchBatch bounds the events one cascade transaction takes.
const maxDispatchBatch = 200

func (d *Daemon) cascadeWorker(ctx, workCtx context.Context) {
	ids := make([]int64, 0, maxDispatchBatch)
	for {
		ids = ids[:0]
		select {
		case <-ctx.Done():
			return
		case id := <-d.events:
			ids = append(ids, id)
		}
		// Whatever else is queued goes in the same transaction.
	drain:
		for len(ids) < maxDispatchBatch {
			select {
			case id := <-d.events:
				ids = append(ids, id)
			default:
				break drain
			}
		}
		res, err := d.cascade.DispatchMany(workCtx, ids)
		if err != nil {
			d.log.Error("dispatch failed; the sweep will retry", zap.Int64s("event_ids", ids), zap.Error(err))
			continue
		}
		if res.Events > 0 {
			d.log.Debug("events dispatched", zap.Int("events", res.Events), zap.Int("edges", res.EdgesResolved), zap.Int("decided", len(res.Decided)))
		}
		for _, dec := range res.Decided {
			// hop_latency: from the oldest upstream completion event of the
			// batch to the decision, by the database clock.
			d.log.Info("edge group decided",
				zap.String(logging.FieldFlowID, dec.FlowID.String()), zap.String(logging.FieldExecutionID, dec.Downstream.String()),
				zap.String("decision", string(dec.Decision)), zap.String("policy", string(dec.Policy.Kind)),
				zap.Duration("hop_latency", res.Age))
		}
		if res.CancelGroups > 0 {
			select {
			case d.siblings <- struct{}{}:
			default:
			}
		}
	}
}

func (d *Daemon) siblingWorker(ctx, workCtx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.siblings:
			groups, n, err := d.cascade.CancelSiblings(workCtx, d.cfg.SweepBatch)
			if err != nil {
				d.log.Error("sibling cancellation failed; the sweep will retry", zap.Error(err))
				continue
			}
			if n > 0 {
				d.log.Info("siblings cancelled", zap.Int("groups", groups), zap.Int("cancelled", n))
			}
		}
	}
}

func (d *Daemon) sweepLoop(ctx, workCtx context.Context) {
	for {
		wait := time.Duration(float64(d.cfg.SweepInterval) * (0.9 + 0.2*rand.Float64()))
		timer := time.NewTimer(wait)
		full := false
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case full = <-d.sweepNow:
			timer.Stop()
		}
		d.sweep(workCtx, full)
	}
}

// sweep finds everything notifications should have delivered: undispatched
// events, pending cancel groups, lapsed leases and attempt timeouts, passed
// deadlines and due delays. full (after a (re)connect) ignores the grace,
// since the notifications of that window are lost.
func (d *Daemon) sweep(ctx context.Context, full bool) {
	d.sweepMu.Lock()
	defer d.sweepMu.Unlock()
	d.sweepCount.Add(1)
	grace := d.cfg.DispatchGrace
	if full {
		grace = 0
	}
	for range 100 { // bounded: a huge backlog is worked over several sweeps
		res, err := d.cascade.DispatchBatch(ctx, d.cfg.SweepBatch, grace)
		if err != nil {
			d.log.Error("sweep: dispatch failed", zap.Error(err))
			break
		}
		if res.Events > 0 {
			d.m.sweepFound.WithLabelValues("completion_event").Add(float64(res.Events))
			d.log.Debug("sweep dispatched events", zap.Int("events", res.Events))
		}
		if res.Events < d.cfg.SweepBatch {
			break
		}
	}
	groups, n, err := d.cascade.CancelSiblings(ctx, d.cfg.SweepBatch)
	if err != nil {
		d.log.Error("sweep: sibling cancellation failed", zap.Error(err))
	} else if groups > 0 {
		d.m.sweepFound.WithLabelValues("cancel_group").Add(float64(groups))
		d.log.Info("sweep cancelled siblings", zap.Int("groups", groups), zap.Int("cancelled", n))
	}
	exp, err := leases.SweepLapsed(ctx, d.cfg.Pool, d.cfg.SweepBatch)
	if err != nil {
		d.log.Error("sweep: lease expiry failed", zap.Error(err))
	} else if exp.Retried+exp.Terminated > 0 {
		d.m.sweepFound.WithLabelValues("lapsed_lease").Add(float64(exp.Retried + exp.Terminated))
		d.recordExpired(exp)
		d.log.Info("sweep expired leases", zap.Int("retried", exp.Retried), zap.Int("expired", exp.Terminated))
	}
	dl, err := leases.SweepDeadlines(ctx, d.cfg.Pool, d.cfg.SweepBatch)
	if err != nil {
		d.log.Error("sweep: deadline expiry failed", zap.Error(err))
	} else if dl > 0 {
		d.m.sweepFound.WithLabelValues("deadline").Add(float64(dl))
		d.m.deadlinesExpired.Add(float64(dl))
		d.log.Info("sweep expired deadlines", zap.Int("expired", dl))
	}
	lanes, next, err := store.NotifyDueLanes(ctx, d.cfg.Pool, d.dueSince)
	if err != nil {
		d.log.Error("sweep: due lanes failed", zap.Error(err))
	} else {
		d.dueSince = next
		if len(lanes) > 0 {
			d.m.readyNotified.Add(float64(len(lanes)))
			d.log.Debug("sweep sent ff_ready for due lanes", zap.Strings("lanes", lanes))
		}
	}
}

func (d *Daemon) recordExpired(e leases.Expired) {
	for _, c := range []struct {
		reason, result string
		n              int
	}{
		{"lease_lapsed", "retried", e.LapsedRetried}, {"lease_lapsed", "expired", e.LapsedExpired},
		{"attempt_timeout", "retried", e.TimeoutRetried}, {"attempt_timeout", "expired", e.TimeoutExpired},
	} {
		if c.n > 0 {
			d.m.leasesExpired.WithLabelValues(c.reason, c.result).Add(float64(c.n))
		}
	}
}

// watchdog pings systemd only while the database answers, and keeps the
// readiness flag in step with it.
func (d *Daemon) watchdog(ctx context.Context) {
	interval := d.cfg.Notifier.WatchdogInterval()
	check := 5 * time.Second
	if interval > 0 {
		check = min(check, interval/2)
	}
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		pctx, cancel := context.WithTimeout(ctx, check)
		err := d.cfg.Pool.Ping(pctx)
		cancel()
		if d.dbOK.Swap(err == nil) != (err == nil) {
			if err != nil {
				d.log.Warn("database not answering; not ready", zap.Error(err))
			} else {
				d.log.Info("database answering again")
			}
		}
		if err == nil && interval > 0 {
			d.cfg.Notifier.Notify("WATCHDOG=1")
		}
	}
}

// sampleLoop refreshes the executions gauge (live states only: counting
// terminal rows would scan the table).
func (d *Daemon) sampleLoop(ctx, workCtx context.Context) {
	t := time.NewTicker(d.cfg.SampleInterval)
	defer t.Stop()
	for {
		d.sample(workCtx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (d *Daemon) sample(ctx context.Context) {
	depths, err := store.LiveByLane(ctx, d.cfg.Pool)
	if err != nil {
		d.log.Debug("sample executions", zap.Error(err))
		return
	}
	d.m.executions.Reset()
	for _, l := range depths {
		d.m.executions.WithLabelValues(l.Lane, string(l.State)).Set(float64(l.Count))
	}
}

// Sweeps counts sweeps run (tests wait on it).
func (d *Daemon) Sweeps() int64 { return d.sweepCount.Load() }

// retentionLoop deletes old outbox events and reports idle consumers.
func (d *Daemon) retentionLoop(ctx, workCtx context.Context) {
	t := time.NewTicker(d.cfg.RetentionInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		d.retain(workCtx)
	}
}

func (d *Daemon) retain(ctx context.Context) {
	if d.cfg.Retention > 0 {
		r, err := outbox.Retain(ctx, d.cfg.Pool, d.cfg.Retention, outbox.DefaultRetentionBatch)
		if err != nil {
			d.log.Error("retention failed", zap.Error(err))
		} else if r.Completion+r.Lease > 0 {
			d.m.outboxDeleted.WithLabelValues("completion").Add(float64(r.Completion))
			d.m.outboxDeleted.WithLabelValues("lease").Add(float64(r.Lease))
			d.log.Info("retention deleted outbox events", zap.Int("completion", r.Completion), zap.Int("lease", r.Lease), zap.Duration("retention", d.cfg.Retention))
		}
	}
	idle, err := store.IdleConsumers(ctx, d.cfg.Pool, d.cfg.ConsumerIdleLimit)
	if err != nil {
		d.log.Warn("read idle consumers", zap.Error(err))
		return
	}
	d.m.idleConsumers.Set(float64(len(idle)))
	for _, c := range idle {
		d.log.Warn("outbox consumer idle while events wait; it holds retention back (drop it with ffd events drop-consumer if it is gone)",
			zap.String("consumer", c.Name), zap.String("stream", string(c.Stream)), zap.Duration("idle", c.Idle))
	}
}
