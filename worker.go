package ffd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/outbox"
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
	spawns spawnList
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
	// Lanes to claim from; at least one. Required. Each lane is claimed
	// by a loop of its own, so a lane whose claims are slow never delays
	// another's; while several lanes claim, each takes an equal share of
	// the free slots, and none more than its share of Concurrency
	// (Concurrency divided by the lanes, rounded up) in one claim.
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
	// Versions are the versions of the handler set this worker serves
	// (docs/workflows.md, "Versions"): it claims executions of these
	// versions, and unversioned ones, and never those of another
	// version. Start announces them in the client's namespace, so that
	// creates may name them. Each is 1-64 of [A-Za-z0-9_.:+-]. Default
	// none: the worker claims unversioned executions only.
	Versions []string
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
	// one behind the lock waits alone. A wait is never longer than a
	// quarter of the lease of an execution it completes: the renewal of
	// that lease waits behind the completion's hold on its row, and must
	// land. 10ms..1h. Default DefaultCompletionLockTimeout.
	CompletionLockTimeout time.Duration
}

// Worker claims and runs executions. Start it once; Stop it once.
//
// It is three parts, each with Start and Stop: the claim loop (claimer:
// claims into free slots, LISTENs for wake-ups and revocations), the
// executor (runs handlers under heartbeats, cancels the ones whose lease
// is taken away, fails what failed) and the completer (records
// successes in group commits). Stop takes them down in that order.
type Worker struct {
	client *Client
	cfg    WorkerConfig
	name   string
	log    *zap.Logger

	claims   *claimer
	exec     *executor
	complete *completer

	mu       sync.Mutex
	started  bool
	stopOnce sync.Once
	stopErr  error

	// An announcement of Versions that Start could not make for a
	// passing reason is made again in the background until Stop.
	announcing     sync.WaitGroup
	stopAnnouncing context.CancelFunc
}

// NewWorker validates cfg and builds a worker over client.
func NewWorker(client *Client, cfg WorkerConfig) (*Worker, error) {
	if client == nil {
		return nil, errors.New("ffd: NewWorker needs a client")
	}
	if len(cfg.Lanes) == 0 {
		return nil, fault.Invalid(ffdtype.KindRequired, "lanes", "", "at least one lane is required")
	}
	if err := workerLanesAndVersions(&cfg); err != nil {
		return nil, err
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
	if cfg.Kinds != nil && cfg.Kinds.batchMax > cfg.Concurrency {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "Concurrency", strconv.Itoa(cfg.Concurrency),
			fmt.Sprintf("a batch kind takes up to %d at once: want a Concurrency of at least that", cfg.Kinds.batchMax))
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
	w := &Worker{client: client, cfg: cfg, name: name, log: client.cfg.Logger.With(zap.String(logging.FieldWorker, name))}
	w.complete = newCompleter(client, cfg.CompletionLockTimeout, cfg.Metrics, w.log, cfg.Concurrency)
	w.exec = newExecutor(client, &w.cfg, w.log, w.complete)
	w.claims = newClaimer(client, &w.cfg, name, w.log, w.exec)
	return w, nil
}

// workerLanesAndVersions checks a worker's lanes (none the daemon's own)
// and versions, and gives it the capability of each version.
func workerLanesAndVersions(cfg *WorkerConfig) error {
	for _, l := range cfg.Lanes {
		if err := leases.ValidateName("lanes", l); err != nil {
			return err
		}
		if l == store.SubflowLane {
			return fault.Invalid(ffdtype.KindInvalidValue, "lanes", l, "the lane of sub-flow steps, which the daemon starts")
		}
	}
	caps := slices.Clone(cfg.Capabilities)
	for _, c := range caps {
		if strings.HasPrefix(c, ffdtype.VersionCapabilityPrefix) {
			return fault.Invalid(ffdtype.KindInvalidValue, "capabilities", c, "a version's capability; list the version in Versions")
		}
	}
	for _, v := range cfg.Versions {
		if v == "" {
			return fault.Invalid(ffdtype.KindRequired, "versions", "", "a version needs a name")
		}
		if err := leases.ValidateVersion("versions", v); err != nil {
			return err
		}
		if c := ffdtype.VersionCapability(v); !slices.Contains(caps, c) {
			caps = append(caps, c)
		}
	}
	cfg.Capabilities = caps
	return nil
}

// Name is "ID/Instance", as recorded on leases.
func (w *Worker) Name() string { return w.name }

// Start begins claiming; it returns at once. The worker runs until Stop;
// ctx's values reach the handlers, its cancellation does not (call Stop).
// It announces the worker's Versions first; when the database cannot be
// reached for that (a transient failure), it logs so and announces in the
// background until it can, claiming meanwhile. Any other failure is
// Start's error.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("ffd: worker already started")
	}
	if len(w.cfg.Versions) > 0 {
		if err := store.AnnounceVersions(ctx, w.client.pool, w.client.cfg.Namespace, w.cfg.Versions); err != nil {
			if !retriable(ctx, err) {
				return err
			}
			w.announceLater(ctx, err)
		}
	}
	w.started = true
	// Results are recorded and handlers run on contexts that only Stop's
	// deadline cuts; the claim loop ends with Stop.
	base := context.WithoutCancel(ctx)
	for _, start := range []func(context.Context) error{w.complete.Start, w.exec.Start, w.claims.Start} {
		if err := start(base); err != nil {
			return err
		}
	}
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

// announceLater makes the announcement of the worker's versions that
// Start could not make (the database, or a node of it, away for a
// while), again after a backoff until it is made or Stop. The worker
// claims meanwhile: a claim reads no announcement, which is there for
// producers, and a version already announced stays so. Returning the
// error instead stopped a worker that started during an outage, which a
// worker already running rides out.
func (w *Worker) announceLater(ctx context.Context, first error) {
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.stopAnnouncing = cancel
	w.log.Warn("announce versions failed; retrying in the background", zap.Strings("versions", w.cfg.Versions), zap.Error(first))
	w.announcing.Add(1)
	go func() {
		defer w.announcing.Done()
		retry := outbox.NewBackoff()
		for retry.Wait(actx) {
			err := store.AnnounceVersions(actx, w.client.pool, w.client.cfg.Namespace, w.cfg.Versions)
			if err == nil {
				w.log.Info("versions announced", zap.Strings("versions", w.cfg.Versions))
				return
			}
			if !retriable(actx, err) {
				if actx.Err() == nil {
					w.log.Error("announce versions failed; not retrying", zap.Strings("versions", w.cfg.Versions), zap.Error(err))
				}
				return
			}
			w.log.Warn("announce versions failed; retrying", zap.Duration("retry_in", retry.Next()), zap.Error(err))
		}
	}()
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
// every handler finished. A second Stop returns the first one's result.
func (w *Worker) Stop(ctx context.Context) error {
	w.mu.Lock()
	started := w.started
	w.mu.Unlock()
	if !started {
		return nil
	}
	w.stopOnce.Do(func() { w.stopErr = w.stop(ctx) })
	return w.stopErr
}

func (w *Worker) stop(ctx context.Context) error {
	if w.stopAnnouncing != nil {
		w.stopAnnouncing()
		w.announcing.Wait()
	}
	// Claims in flight are cancelled: this is prompt.
	_ = w.claims.Stop(context.WithoutCancel(ctx))
	waitCtx, handBackCtx, cancel := w.stopContexts(ctx)
	defer cancel()
	var err error
	if w.exec.Stop(waitCtx) != nil {
		err = ctx.Err()
		if err == nil {
			err = context.DeadlineExceeded // the reserve for the hand-back began
		}
		w.exec.HandBack(handBackCtx)
		// Handlers that honour their context return now; wait for them
		// until the deadline, not longer.
		if w.exec.Stop(handBackCtx) != nil {
			w.log.Warn("handlers still running after stop; abandoning them")
		}
	}
	// Nothing the worker does from here on may outlive Stop: record what
	// results are queued, then cut every call still waiting.
	_ = w.complete.Stop(handBackCtx)
	w.exec.Abort()
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

// jobFields are the log fields of one execution's run.
func jobFields(x *Execution, more ...zap.Field) []zap.Field {
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
