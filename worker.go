package ffd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/panics"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// Worker defaults.
const (
	DefaultConcurrency  = bound.DefaultConcurrency
	DefaultPollInterval = bound.DefaultPollInterval
	// DefaultHandBackTimeout bounds the one statement that hands unfinished
	// executions back when Stop's context ends.
	DefaultHandBackTimeout = bound.DefaultHandBackTimeout
	// DefaultCompletionLockTimeout bounds how long a batch of completions
	// waits for a row lock before it is split up.
	DefaultCompletionLockTimeout = bound.DefaultCompletionLockTimeout
	// finishTimeout bounds the complete/fail call after a handler returns,
	// independent of the handler's context.
	finishTimeout = 30 * time.Second
)

// HandlerFunc runs one execution. A nil error completes it with result; an
// error fails it, retryably unless wrapped with Permanent. ctx is cancelled
// with cause ErrLeaseLost when the lease is lost (the result would be
// refused), or ErrWorkerStopped when the worker stops before it returns.
type HandlerFunc func(ctx context.Context, job *Job) (result []byte, err error)

// Job is one claimed execution, handed to a handler.
type Job struct {
	*Execution
	client *Client // for Upstreams
}

// UnmarshalPayload decodes a JSON payload into v.
func (j *Job) UnmarshalPayload(v any) error {
	if err := json.Unmarshal(j.Payload, v); err != nil {
		return fmt.Errorf("decode payload of %s: %w", j.ID, err)
	}
	return nil
}

// WorkerConfig configures a Worker.
type WorkerConfig struct {
	// Lanes to claim from; at least one. Required.
	Lanes []string
	// Handler runs each execution. Set it, or Kinds; not both.
	Handler HandlerFunc
	// Kinds runs each execution by the handler registered for its kind
	// (Handle, HandleBytes). Set it, or Handler; not both.
	Kinds *Kinds
	// Metrics, when set, measures the worker (NewWorkerMetrics). Default:
	// none, at no cost.
	Metrics *WorkerMetrics
	// ListenConnConfig is the connection the worker LISTENs on for wake-ups
	// and revocations. Default: one like the client's pool's. Behind a
	// PgBouncer in transaction pooling, point it at Postgres directly (a
	// notification never crosses a pooled connection), or set PollOnly.
	ListenConnConfig *pgx.ConnConfig
	// PollOnly runs the worker without LISTEN: it claims every
	// PollInterval and learns of a lease taken away at its next heartbeat
	// (every third of the lease's TTL) instead of at once. For a pool
	// behind PgBouncer without a direct connection. Default false.
	PollOnly bool
	// ID names the worker (a role or host). Default: the host name.
	ID string
	// Instance distinguishes processes with the same ID. Default: random.
	Instance string
	// Capabilities the worker has; it claims only executions whose required
	// capabilities are among them. Default none.
	Capabilities []string
	// Concurrency is how many handlers run at once: 1..10000. Default
	// DefaultConcurrency.
	Concurrency int
	// PollInterval is the fallback claim interval (jittered ±10%) when no
	// ff_ready notification arrives: 10ms..1h. Default DefaultPollInterval.
	PollInterval time.Duration
	// HandBackTimeout bounds handing unfinished executions back when Stop's
	// context ends without a deadline; with a deadline, Stop keeps this
	// much of it (at most a quarter) for the hand-back. 10ms..10m. Default
	// DefaultHandBackTimeout.
	HandBackTimeout time.Duration
	// CompletionLockTimeout bounds how long one batch of completions waits
	// for a row lock (say, a flow row held by a frozen process). Past it
	// the batch is split and each completion retried on its own, so the
	// one behind the lock waits alone. 10ms..1h. Default
	// DefaultCompletionLockTimeout.
	CompletionLockTimeout time.Duration
}

// Worker claims and runs executions. Start it once; Stop it once.
type Worker struct {
	client *Client
	cfg    WorkerConfig
	name   string
	log    *zap.Logger

	wake     chan struct{}
	stopping chan struct{} // closed by Stop: claim nothing more
	// listening is closed once the first LISTEN has succeeded (or failed:
	// the worker then polls); no claim is made before, so that no lease is
	// held while its ff_revoke could go unheard.
	listening     chan struct{}
	listeningOnce sync.Once
	// listenDown is set while the LISTEN connection is down: no ff_revoke
	// reaches the worker then, so each poll asks the database instead.
	listenDown  atomic.Bool
	completions chan *completion
	quit        chan struct{} // closed when the completer may stop

	// stopLoops cancels the claim and listen loops (and a claim in
	// flight); abort cancels every database call the worker still makes
	// (Stop's deadline has come).
	stopLoops context.CancelFunc
	abort     context.CancelFunc
	dbCtx     context.Context // cancelled by abort

	loops     conc.WaitGroup // listen, fetch
	completer conc.WaitGroup // the completer and its lone retries
	jobs      sync.WaitGroup // handlers, with their heartbeats

	mu       sync.Mutex
	active   map[ExecutionID]*runningJob
	started  bool
	stopOnce sync.Once
	quitOnce sync.Once
	more     bool // the last claim filled every slot: likely more due work
}

type runningJob struct {
	x        *Execution
	cancel   context.CancelCauseFunc
	handedIn bool // Stop already failed it back; the handler's result is moot
}

// NewWorker validates cfg and builds a worker over client.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("ffd: NewWorker needs a client")
	}
	if len(cfg.Lanes) == 0 {
		return nil, fault.Invalid(ffdtype.KindRequired, "lanes", "", "at least one lane is required")
	}
	for _, l := range cfg.Lanes {
		if err := leases.ValidateName("lanes", l); err != nil {
			return nil, err
		}
	}
	switch {
	case cfg.Handler != nil && cfg.Kinds != nil:
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "handler", "handler and kinds", "set Handler or Kinds, not both")
	case cfg.Kinds != nil:
		if cfg.Kinds.err != nil {
			return nil, cfg.Kinds.err
		}
		if len(cfg.Kinds.handlers) == 0 {
			return nil, fault.Invalid(ffdtype.KindRequired, "kinds", "empty", "register at least one kind")
		}
		cfg.Handler = cfg.Kinds.route()
	case cfg.Handler == nil:
		return nil, fault.Invalid(ffdtype.KindRequired, "handler", "nil", "a handler (Handler or Kinds) is required")
	}
	for _, err := range []error{
		bound.Concurrency.Fill("Concurrency", &cfg.Concurrency),
		bound.PollInterval.Fill("PollInterval", &cfg.PollInterval),
		bound.HandBackTimeout.Fill("HandBackTimeout", &cfg.HandBackTimeout),
		bound.CompletionLockTimeout.Fill("CompletionLockTimeout", &cfg.CompletionLockTimeout),
	} {
		if err != nil {
			return nil, err
		}
	}
	if cfg.ID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "worker"
		}
		cfg.ID = host
	}
	if cfg.Instance == "" {
		cfg.Instance = uuid.NewString()[:8]
	}
	name := cfg.ID + "/" + cfg.Instance
	if err := leases.ValidateWorker(name); err != nil {
		return nil, err
	}
	return &Worker{
		client:      client,
		cfg:         cfg,
		name:        name,
		log:         client.cfg.Logger.With(zap.String(logging.FieldWorker, name)),
		wake:        make(chan struct{}, 1),
		stopping:    make(chan struct{}),
		listening:   make(chan struct{}),
		completions: make(chan *completion, max(cfg.Concurrency, maxCompletionBatch)),
		quit:        make(chan struct{}),
		active:      map[ExecutionID]*runningJob{},
	}, nil
}

// Name is "ID/Instance", as recorded on leases.
func (w *Worker) Name() string { return w.name }

// Start begins claiming; it returns at once. The worker runs until Stop;
// ctx's values reach the handlers, its cancellation does not (call Stop).
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("ffd: worker already started")
	}
	w.started = true
	dbCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	loopCtx, stopLoops := context.WithCancel(dbCtx)
	w.abort, w.stopLoops, w.dbCtx = abort, stopLoops, dbCtx
	w.loops.Go(func() { w.listen(loopCtx) })
	w.loops.Go(func() { w.fetch(loopCtx, dbCtx) })
	w.loops.Go(func() { w.client.stall.watch(loopCtx, w.client) })
	w.completer.Go(func() { w.runCompleter(dbCtx) })
	w.signal()
	return nil
}

// Run is Start, then Stop once ctx ends: the shape of a worker process.
// Handlers under way get up to stopTimeout to finish before they are cut
// short and handed back (see Stop). It returns Start's error, or Stop's.
func (w *Worker) Run(ctx context.Context, stopTimeout time.Duration) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
	defer cancel()
	return w.Stop(sctx)
}

// Stop stops claiming at once and waits for running handlers until ctx
// ends. Any handler still running then has its context cancelled (cause
// ErrWorkerStopped) and every such execution is handed back in one
// statement: pending again with no backoff, so another worker picks it
// up at once (failed instead when it has no attempt left). With a
// deadline on ctx, Stop keeps part of it (HandBackTimeout, at most a
// quarter) for that statement and returns by the deadline; without one it
// spends up to HandBackTimeout after ctx ends. Stop waits for every
// goroutine the worker started, except a handler that ignores its
// context: that one is abandoned, and its result, if it ever comes, is
// dropped. It returns ctx's error when handlers were cut short, nil when
// every handler finished.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	w.stopOnce.Do(func() {
		close(w.stopping)
		w.stopLoops()
	})
	w.loops.Wait() // claims in flight were cancelled: this is prompt

	waitCtx, handBackCtx, cancel := w.stopContexts(ctx)
	defer cancel()
	jobsDone := make(chan struct{})
	go func() { w.jobs.Wait(); close(jobsDone) }()
	var err error
	select {
	case <-jobsDone:
	case <-waitCtx.Done():
		err = ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded // the reserve for the hand-back began
		}
		w.handBack(handBackCtx)
		// Handlers that honour their context return now; wait for them
		// until the deadline, not longer.
		select {
		case <-jobsDone:
		case <-handBackCtx.Done():
			w.log.Warn("handlers still running after stop; abandoning them")
		}
	}
	// Nothing the worker does from here on may outlive Stop: flush what
	// completions are queued, then cut every call still waiting.
	w.quitOnce.Do(func() { close(w.quit) })
	flushed := make(chan struct{})
	go func() { w.completer.Wait(); close(flushed) }()
	select {
	case <-flushed:
	case <-handBackCtx.Done():
		w.abort()
		<-flushed
	}
	w.abort()
	return err
}

// stopContexts splits Stop's context: waitCtx ends when handlers must be
// cut short, handBackCtx when everything must be over.
func (w *Worker) stopContexts(ctx context.Context) (waitCtx, handBackCtx context.Context, cancel func()) {
	deadline, ok := ctx.Deadline()
	if !ok {
		// No deadline: wait until ctx ends, then take HandBackTimeout.
		hb, cancelHB := context.WithCancel(context.WithoutCancel(ctx))
		var timer *time.Timer
		stop := context.AfterFunc(ctx, func() { timer = time.AfterFunc(w.cfg.HandBackTimeout, cancelHB) })
		return ctx, hb, func() {
			stop()
			if timer != nil {
				timer.Stop()
			}
			cancelHB()
		}
	}
	reserve := min(w.cfg.HandBackTimeout, time.Until(deadline)/4)
	waitCtx, cancelWait := context.WithDeadline(ctx, deadline.Add(-reserve))
	handBackCtx, cancelHB := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	return waitCtx, handBackCtx, func() { cancelWait(); cancelHB() }
}

// handBack cancels every running handler and gives its lease back, all in
// one statement.
func (w *Worker) handBack(ctx context.Context) {
	w.mu.Lock()
	var held []leases.Held
	var jobs []*runningJob
	for _, j := range w.active {
		if j.handedIn {
			continue
		}
		j.handedIn = true
		j.cancel(ErrWorkerStopped)
		held = append(held, leases.Held{ID: j.x.ID, Epoch: j.x.LeaseEpoch})
		jobs = append(jobs, j)
	}
	w.mu.Unlock()
	if len(held) == 0 {
		return
	}
	requeued, failed, err := leases.HandBack(ctx, w.client.pool, held, "worker stopped before the handler finished")
	if err != nil {
		// The leases lapse after their TTL and the sweep retries them.
		w.log.Error("hand back executions on stop; they will be retried when their leases lapse", zap.Int("executions", len(held)), zap.Error(err))
		return
	}
	w.log.Info("executions handed back on stop", zap.Int("requeued", requeued), zap.Int("failed", failed), zap.Int("lease_moved_on", len(held)-requeued-failed))
	for _, j := range jobs {
		if ce := w.log.Check(zap.DebugLevel, "execution handed back"); ce != nil {
			ce.Write(w.jobFields(j.x)...)
		}
	}
}

func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) jobFields(x *Execution, more ...zap.Field) []zap.Field {
	fields := []zap.Field{
		zap.String(logging.FieldExecutionID, x.ID.String()),
		zap.String(logging.FieldLane, x.Lane),
		zap.Int64(logging.FieldLeaseEpoch, x.LeaseEpoch),
		zap.Int("attempt", x.Attempt),
	}
	if x.Kind != "" {
		fields = append(fields, zap.String(logging.FieldKind, x.Kind))
	}
	if x.FlowID != nil {
		fields = append(fields, zap.String(logging.FieldFlowID, x.FlowID.String()), zap.String(logging.FieldStep, x.Step))
	}
	return append(fields, more...)
}

// fetch claims while there are free slots and due work; it sleeps until a
// notification, a finished job, or the jittered poll interval.
func (w *Worker) fetch(ctx, jobCtx context.Context) {
	select {
	case <-w.listening:
	case <-w.stopping:
		return
	}
	next := 0
	for {
		if w.listenDown.Load() {
			// Revocations sent while the LISTEN connection is down reach
			// nobody: ask, once a poll, which held leases are gone.
			w.recheckLeases(ctx)
		}
		w.claimFree(ctx, jobCtx, &next)
		timer := time.NewTimer(jitter(w.cfg.PollInterval))
		select {
		case <-w.stopping:
			timer.Stop()
			return
		case <-w.wake:
		case <-timer.C:
		}
		timer.Stop()
	}
}

func (w *Worker) claimFree(ctx, jobCtx context.Context, next *int) {
	for {
		select {
		case <-w.stopping:
			return
		default:
		}
		w.mu.Lock()
		free := w.cfg.Concurrency - len(w.active)
		w.mu.Unlock()
		if free <= 0 {
			return
		}
		// Lanes take turns so a busy lane cannot starve the others.
		claimed := 0
		for range w.cfg.Lanes {
			lane := w.cfg.Lanes[*next%len(w.cfg.Lanes)]
			*next++
			xs, err := w.client.Claim(ctx, ClaimParams{Lane: lane, Worker: w.name, Capabilities: w.cfg.Capabilities, Max: free - claimed})
			w.cfg.Metrics.claimed(len(xs))
			if err != nil {
				if ctx.Err() == nil {
					w.log.Warn("claim failed; retrying at the next poll", zap.String(logging.FieldLane, lane), zap.Error(err))
				}
				return
			}
			for _, x := range xs {
				w.run(jobCtx, x)
			}
			claimed += len(xs)
			if claimed == free {
				break
			}
		}
		w.mu.Lock()
		w.more = claimed == free
		w.mu.Unlock()
		if claimed < free {
			return
		}
	}
}

func (w *Worker) run(base context.Context, x *Execution) {
	ctx, cancel := context.WithCancelCause(base)
	j := &runningJob{x: x, cancel: cancel}
	w.mu.Lock()
	w.active[x.ID] = j
	w.mu.Unlock()
	w.jobs.Add(1)
	go func() {
		defer w.jobs.Done()
		defer cancel(nil)
		w.execute(ctx, j)
		w.mu.Lock()
		delete(w.active, x.ID)
		more := w.more
		w.mu.Unlock()
		if more {
			w.signal()
		}
	}()
}

func (w *Worker) execute(ctx context.Context, j *runningJob) {
	x := j.x
	if ce := w.log.Check(zap.DebugLevel, "execution claimed"); ce != nil {
		ce.Write(w.jobFields(x)...)
	}
	ctx, span := w.client.tracing.start(ctx, x)
	start := time.Now()
	w.cfg.Metrics.running(x.Lane, 1)
	result, herr := w.runHandler(ctx, j)
	w.cfg.Metrics.running(x.Lane, -1)
	w.finish(ctx, j, result, herr, func(outcome string) {
		w.cfg.Metrics.handled(x.Lane, x.Kind, outcome, time.Since(start))
		span.end(outcome, herr)
	})
}

// runHandler runs the handler while heartbeating its lease; a panic is
// the handler's error.
func (w *Worker) runHandler(ctx context.Context, j *runningJob) (result []byte, herr error) {
	x := j.x
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() {
		defer close(hbStopped)
		w.heartbeat(ctx, j, hbDone)
	}()
	var pc panics.Catcher
	pc.Try(func() { result, herr = w.cfg.Handler(ctx, &Job{Execution: x, client: w.client}) })
	close(hbDone)
	<-hbStopped
	if r := pc.Recovered(); r != nil {
		herr = fmt.Errorf("handler panicked: %v", r.Value)
		w.log.Error("handler panicked", w.jobFields(x, zap.Any("panic", r.Value), zap.String("stack", string(r.Stack)))...)
	}
	return result, herr
}

// finish records the handler's outcome and reports which it was (stopped,
// lease_lost, completed, retried or failed). A success is handed to the
// completer and reported when its batch commits: the handler's slot is
// free at once, so the worker claims again while the result is written.
func (w *Worker) finish(ctx context.Context, j *runningJob, result []byte, herr error, report func(outcome string)) {
	x := j.x
	w.mu.Lock()
	handedIn := j.handedIn
	w.mu.Unlock()
	if handedIn {
		report(HandlerStopped)
		return
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		// Expected when the engine cancels a losing sibling or an operator
		// revokes: the lease moved on and the result would be refused.
		w.log.Info("lease lost; handler result dropped", w.jobFields(x)...)
		report(HandlerLeaseLost)
		return
	}
	if herr == nil {
		w.complete(x, result, func(err error) {
			w.logFinish(x, "completed", err)
			if errors.Is(err, ErrLeaseLost) {
				report(HandlerLeaseLost)
				return
			}
			report(HandlerCompleted)
		})
		return
	}
	report(w.fail(j, herr))
}

// fail records a handler's error: retried or failed.
func (w *Worker) fail(j *runningJob, herr error) string {
	x := j.x
	// The handler's context may be cancelled (lease lost is handled by
	// finish; a cancelled parent is not ours to obey here): record the
	// outcome on the worker's own context, which only Stop's deadline cuts.
	fctx, cancel := context.WithTimeout(w.dbCtx, finishTimeout)
	defer cancel()
	var perm *PermanentError
	retry := !errors.As(herr, &perm)
	out, err := w.client.Fail(fctx, x.ID, x.LeaseEpoch, FailParams{Error: leases.CleanText(herr.Error(), MaxErrorBytes), Retryable: retry})
	state := "failed"
	if out != nil {
		state = string(out.State)
	}
	if err != nil {
		w.logFinish(x, state, err, zap.NamedError("handler_error", herr))
		if errors.Is(err, ErrLeaseLost) {
			return HandlerLeaseLost
		}
		return HandlerFailed
	}
	// The handler's error is the application's to see: the worker
	// recorded it, and says whether the execution will be retried.
	w.log.Warn("handler failed", w.jobFields(x, zap.String("state", state), zap.Bool("retrying", state == string(StatePending)),
		zap.NamedError("handler_error", herr))...)
	if state == string(StatePending) {
		return HandlerRetried
	}
	return HandlerFailed
}

func (w *Worker) logFinish(x *Execution, state string, err error, more ...zap.Field) {
	switch {
	case err == nil:
		if ce := w.log.Check(zap.DebugLevel, "execution "+state); ce != nil {
			ce.Write(w.jobFields(x, more...)...)
		}
	case errors.Is(err, ErrLeaseLost):
		w.log.Warn("lease lost before the result was recorded", w.jobFields(x, append(more, zap.Error(err))...)...)
	default:
		// The lease will lapse and the execution be retried.
		w.log.Error("record execution result", w.jobFields(x, append(more, zap.Error(err))...)...)
	}
}

// heartbeat renews the lease every third of its TTL until done; a fenced
// renewal cancels the handler with ErrLeaseLost.
func (w *Worker) heartbeat(ctx context.Context, j *runningJob, done <-chan struct{}) {
	interval := max(j.x.LeaseTTL/3, 10*time.Millisecond)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, interval)
		_, err := w.client.Renew(rctx, j.x.ID, j.x.LeaseEpoch)
		cancel()
		switch {
		case err == nil:
		case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
			w.log.Info("heartbeat fenced; cancelling handler", w.jobFields(j.x, zap.Error(err))...)
			j.cancel(ErrLeaseLost)
			return
		default:
			w.log.Warn("heartbeat failed; will retry", w.jobFields(j.x, zap.Error(err))...)
		}
	}
}

// WorkerApplicationName is the application_name of a worker's LISTEN
// connection, to find it in pg_stat_activity.
const WorkerApplicationName = "ffd-worker"

// listen wakes the claim loop on ff_ready for the worker's lanes and
// cancels handlers on ff_revoke, through a listener on a connection of its
// own; it polls while the listener is away, and after every (re)connect
// re-checks the leases it holds and claims, since notifications sent
// meanwhile are lost. It returns when ctx ends or the worker stops.
func (w *Worker) listen(ctx context.Context) {
	if w.cfg.PollOnly {
		w.listeningOnce.Do(func() { close(w.listening) })
		return
	}
	cfg := w.client.pool.Config().ConnConfig.Copy()
	if w.cfg.ListenConnConfig != nil {
		cfg = w.cfg.ListenConnConfig.Copy()
	}
	if !session.Guarded(&cfg.Config) {
		// The application's pool has no guard of its own; this connection
		// is ffd's, so it gets ffd's.
		session.Default().Apply(cfg)
	}
	n, err := listener.New(listener.Config{
		ConnConfig:      cfg,
		ApplicationName: WorkerApplicationName,
		Topics:          []listener.Topic{listener.Ready, listener.Revoke},
		Handle:          w.notified,
		OnConnect: func(ctx context.Context, _ bool) {
			w.listenDown.Store(false)
			w.listeningOnce.Do(func() { close(w.listening) })
			// A lease taken away while no LISTEN was active sent its
			// ff_revoke to nobody: ask the database about every lease
			// held, once, now that later revokes will be heard.
			w.recheckLeases(ctx)
			w.signal()
		},
		OnDisconnect: func(error) {
			// Poll meanwhile, and re-check held leases at each poll.
			w.listenDown.Store(true)
			w.listeningOnce.Do(func() { close(w.listening) })
		},
		Logger: w.log.Named("listener"),
	})
	if err != nil {
		w.log.Error("worker listener; polling only", zap.Error(err))
		w.listeningOnce.Do(func() { close(w.listening) })
		return
	}
	n.Start(ctx)
	defer n.Stop()
	select {
	case <-ctx.Done():
	case <-w.stopping:
	}
}

// notified handles one notification; it must not block.
func (w *Worker) notified(n listener.Notification) {
	switch n.Topic {
	case listener.Ready:
		if slices.Contains(w.cfg.Lanes, n.Payload) {
			w.signal()
		}
	case listener.Revoke:
		w.revoked(n.Payload)
	}
}

// revoked cancels the handler holding a lease that was just taken away
// (cancelled, expired, revoked by an operator, or lost to a sibling), so
// that it stops at once rather than at its next heartbeat. The payload is
// "partition:uuid:epoch", the epoch being the one the lease was held at.
func (w *Worker) revoked(payload string) {
	id, epoch, ok := parseRevoke(payload)
	if !ok {
		return
	}
	w.revoke(id, epoch)
}

// recheckLeases cancels the handler of every lease held that the database
// says is gone. A failure is logged: the heartbeat still finds the loss.
func (w *Worker) recheckLeases(ctx context.Context) {
	w.mu.Lock()
	held := make([]store.LeaseRef, 0, len(w.active))
	for id, j := range w.active {
		held = append(held, store.LeaseRef{ID: id, Epoch: j.x.LeaseEpoch})
	}
	w.mu.Unlock()
	if len(held) == 0 {
		return
	}
	lost, err := store.LostLeases(ctx, w.client.pool, held)
	if err != nil {
		w.log.Warn("check held leases after reconnecting; heartbeats will", zap.Error(err))
		return
	}
	for _, l := range lost {
		w.revoke(ExecutionID(l.ID), l.Epoch)
	}
}

func (w *Worker) revoke(id ExecutionID, epoch int64) {
	w.mu.Lock()
	j := w.active[id]
	w.mu.Unlock()
	if j == nil || j.x.LeaseEpoch != epoch {
		return
	}
	w.log.Info("lease revoked; cancelling handler", w.jobFields(j.x)...)
	j.cancel(ErrLeaseLost)
}

func parseRevoke(s string) (ExecutionID, int64, bool) {
	part, rest, ok1 := strings.Cut(s, ":")
	u, ep, ok2 := strings.Cut(rest, ":")
	if !ok1 || !ok2 {
		return ExecutionID{}, 0, false
	}
	p, err1 := strconv.ParseInt(part, 10, 16)
	id, err2 := uuid.Parse(u)
	epoch, err3 := strconv.ParseInt(ep, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return ExecutionID{}, 0, false
	}
	return ExecutionID{Partition: int16(p), UUID: id}, epoch, true
}

// jitter spreads d by ±10% so that many workers do not poll in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// completion is a handler's result waiting for the completer.
type completion struct {
	x      *Execution
	result []byte
	done   func(error) // called once, when the result is recorded or refused
}

// maxCompletionBatch bounds one group commit of completions.
const maxCompletionBatch = 500

// complete hands a result to the completer, which commits completions in
// batches (one transaction for whatever is waiting: group commit), each
// still fenced on its own lease epoch, and calls done with the outcome.
// It returns once the result is queued; when the queue is full (the
// completer is behind by a whole batch, or a whole worker's concurrency
// if that is more) it waits, holding the handler's slot, so a slow
// database slows claims rather than piling results up in memory. A
// queue of one batch lets the next batch gather while one commits.
func (w *Worker) complete(x *Execution, result []byte, done func(error)) {
	c := &completion{x: x, result: result, done: done}
	select {
	case <-w.quit: // the worker stopped: no completer any more
		w.completeNow(c)
		return
	default:
	}
	select {
	case w.completions <- c:
	case <-w.quit:
		w.completeNow(c)
	case <-w.dbCtx.Done(): // Stop's deadline came while the queue was full
		c.done(w.dbCtx.Err())
	}
}

// completeNow records one result on the caller's goroutine, once the
// completer is gone.
func (w *Worker) completeNow(c *completion) {
	ctx, cancel := context.WithTimeout(w.dbCtx, finishTimeout)
	defer cancel()
	_, err := w.client.Complete(ctx, c.x.ID, c.x.LeaseEpoch, c.result)
	c.done(err)
}

// runCompleter commits completions in batches until quit, then flushes
// everything still queued.
func (w *Worker) runCompleter(ctx context.Context) {
	batch := make([]*completion, 0, maxCompletionBatch)
	for {
		batch = batch[:0]
		quitting := false
		select {
		case c := <-w.completions:
			batch = append(batch, c)
		case <-w.quit:
			quitting = true
		}
	fill:
		for len(batch) < maxCompletionBatch {
			select {
			case c := <-w.completions:
				batch = append(batch, c)
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			w.commit(ctx, batch)
		}
		if quitting && len(w.completions) == 0 {
			return
		}
	}
}

// commit completes a batch in one transaction. A batch that waited too
// long for a row lock is split: each completion is retried on its own, in
// the background, so the completer goes back to new completions at once
// and only the completion behind the lock keeps waiting.
func (w *Worker) commit(ctx context.Context, batch []*completion) {
	items := make([]leases.Completion, len(batch))
	for i, c := range batch {
		items[i] = leases.Completion{ID: c.x.ID, Epoch: c.x.LeaseEpoch, Result: c.result}
	}
	cctx, cancel := context.WithTimeout(ctx, finishTimeout)
	start := time.Now()
	_, errs, err := leases.CompleteMany(cctx, w.client.pool, w.client.limits, items, w.cfg.CompletionLockTimeout)
	w.cfg.Metrics.committed(time.Since(start))
	cancel()
	if store.IsLockTimeout(err) {
		w.log.Warn("completion batch waited too long for a lock; completing each on its own", zap.Int("completions", len(batch)))
		for _, c := range batch {
			w.completer.Go(func() { w.completeAlone(ctx, c) })
		}
		return
	}
	for i, c := range batch {
		if err != nil {
			c.done(err)
		} else {
			c.done(errs[i])
		}
	}
}

// completeAlone retries one completion, waiting out lock timeouts with
// backoff, for at most finishTimeout.
func (w *Worker) completeAlone(ctx context.Context, c *completion) {
	ctx, cancel := context.WithTimeout(ctx, finishTimeout)
	defer cancel()
	backoff := 50 * time.Millisecond
	item := []leases.Completion{{ID: c.x.ID, Epoch: c.x.LeaseEpoch, Result: c.result}}
	for {
		_, errs, err := leases.CompleteMany(ctx, w.client.pool, w.client.limits, item, w.cfg.CompletionLockTimeout)
		if err == nil {
			c.done(errs[0])
			return
		}
		if !store.IsLockTimeout(err) {
			c.done(err)
			return
		}
		select {
		case <-ctx.Done():
			c.done(err)
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, time.Second)
	}
}
