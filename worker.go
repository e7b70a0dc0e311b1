package ffd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/sourcegraph/conc"
	"github.com/sourcegraph/conc/panics"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/session"
)

// Worker defaults.
const (
	DefaultConcurrency  = 10
	DefaultPollInterval = time.Second
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
	// Handler runs each execution. Required.
	Handler HandlerFunc
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
}

// Worker claims and runs executions. Start it once; Stop it once.
type Worker struct {
	client *Client
	cfg    WorkerConfig
	name   string
	log    *zap.Logger

	wake        chan struct{}
	stopping    chan struct{}
	completions chan *completion
	quit        chan struct{} // closed when the completer may stop
	loops       conc.WaitGroup
	jobs        sync.WaitGroup

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
		return nil, fault.Invalid(fault.KindRequired, "lanes", "", "at least one lane is required")
	}
	for _, l := range cfg.Lanes {
		if err := leases.ValidateName("lanes", l); err != nil {
			return nil, err
		}
	}
	if cfg.Handler == nil {
		return nil, fault.Invalid(fault.KindRequired, "handler", "nil", "a handler is required")
	}
	if err := bound.Concurrency.CheckOrZero("Concurrency", cfg.Concurrency); err != nil {
		return nil, err
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = DefaultConcurrency
	}
	if err := bound.PollInterval.CheckOrZero("PollInterval", cfg.PollInterval); err != nil {
		return nil, err
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = DefaultPollInterval
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
		completions: make(chan *completion, cfg.Concurrency),
		quit:        make(chan struct{}),
		active:      map[ExecutionID]*runningJob{},
	}, nil
}

// Name is "ID/Instance", as recorded on leases.
func (w *Worker) Name() string { return w.name }

// Start begins claiming; it returns at once. The worker runs until Stop.
func (w *Worker) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started {
		return errors.New("ffd: worker already started")
	}
	w.started = true
	base := context.WithoutCancel(ctx)
	w.loops.Go(func() { w.listen(base) })
	w.loops.Go(func() { w.fetch(base) })
	for range completers {
		go w.completer(base)
	}
	w.signal()
	return nil
}

// Stop stops claiming and waits for running handlers until ctx ends. Any
// handler still running then has its context cancelled (cause
// ErrWorkerStopped) and its execution failed back as retryable with no
// backoff, so another worker picks it up at once. Stop returns ctx's error
// in that case, nil when every handler finished.
func (w *Worker) Stop(ctx context.Context) error {
	w.stopOnce.Do(func() { close(w.stopping) })
	w.loops.Wait()
	done := make(chan struct{})
	go func() { w.jobs.Wait(); close(done) }()
	defer w.quitOnce.Do(func() { close(w.quit) })
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	w.mu.Lock()
	var left []*runningJob
	for _, j := range w.active {
		j.handedIn = true
		left = append(left, j)
	}
	w.mu.Unlock()
	for _, j := range left {
		j.cancel(ErrWorkerStopped)
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		_, err := w.client.Fail(fctx, j.x.ID, j.x.LeaseEpoch, FailParams{Error: "worker stopped before the handler finished", Retryable: true, Immediate: true})
		cancel()
		if err != nil && !errors.Is(err, ErrLeaseLost) {
			w.log.Error("hand back execution on stop", w.jobFields(j.x, zap.Error(err))...)
		} else {
			w.log.Info("execution handed back on stop", w.jobFields(j.x)...)
		}
	}
	return ctx.Err()
}

func (w *Worker) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *Worker) jobFields(x *Execution, more ...zap.Field) []zap.Field {
	return append([]zap.Field{
		zap.String(logging.FieldExecutionID, x.ID.String()),
		zap.String(logging.FieldLane, x.Lane),
		zap.Int64(logging.FieldLeaseEpoch, x.LeaseEpoch),
		zap.Int("attempt", x.Attempt),
	}, more...)
}

// fetch claims while there are free slots and due work; it sleeps until a
// notification, a finished job, or the jittered poll interval.
func (w *Worker) fetch(ctx context.Context) {
	next := 0
	for {
		w.claimFree(ctx, &next)
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

func (w *Worker) claimFree(ctx context.Context, next *int) {
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
			if err != nil {
				w.log.Warn("claim failed; retrying at the next poll", zap.String(logging.FieldLane, lane), zap.Error(err))
				return
			}
			for _, x := range xs {
				w.run(ctx, x)
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
	hbDone := make(chan struct{})
	hbStopped := make(chan struct{})
	go func() {
		defer close(hbStopped)
		w.heartbeat(ctx, j, hbDone)
	}()

	var result []byte
	var herr error
	var pc panics.Catcher
	pc.Try(func() { result, herr = w.cfg.Handler(ctx, &Job{Execution: x}) })
	close(hbDone)
	<-hbStopped
	if r := pc.Recovered(); r != nil {
		herr = fmt.Errorf("handler panicked: %v", r.Value)
		w.log.Error("handler panicked", w.jobFields(x, zap.Any("panic", r.Value), zap.String("stack", string(r.Stack)))...)
	}

	w.mu.Lock()
	handedIn := j.handedIn
	w.mu.Unlock()
	if handedIn {
		return
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		// Expected when the engine cancels a losing sibling or an operator
		// revokes: the lease moved on and the result would be refused.
		w.log.Info("lease lost; handler result dropped", w.jobFields(x)...)
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	if herr == nil {
		w.logFinish(x, "completed", w.complete(fctx, x, result))
		return
	}
	var perm *PermanentError
	retry := !errors.As(herr, &perm)
	out, err := w.client.Fail(fctx, x.ID, x.LeaseEpoch, FailParams{Error: leases.CleanText(herr.Error(), MaxErrorBytes), Retryable: retry})
	state := "failed"
	if out != nil {
		state = string(out.State)
	}
	w.logFinish(x, state, err, zap.NamedError("handler_error", herr))
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

// listen wakes the claim loop on ff_ready for the worker's lanes, on a
// connection of its own; it reconnects with backoff and wakes the claim
// loop after each reconnect, since notifications sent meanwhile are lost.
func (w *Worker) listen(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-w.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := w.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("ff_ready listener disconnected; polling until it reconnects", zap.Error(err), zap.Duration("retry_in", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (w *Worker) listenOnce(ctx context.Context) error {
	cfg := w.client.pool.Config().ConnConfig.Copy()
	if !session.Guarded(&cfg.Config) {
		// The application's pool has no guard of its own; this connection
		// is ffd's, so it gets ffd's.
		session.Default().Apply(cfg)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN ff_ready`); err != nil {
		return err
	}
	w.signal()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if slices.Contains(w.cfg.Lanes, n.Payload) {
			w.signal()
		}
	}
}

// jitter spreads d by ±10% so that many workers do not poll in step.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.9 + 0.2*rand.Float64()))
}

// completion is a handler's result waiting for the completer.
type completion struct {
	x      *Execution
	result []byte
	done   chan error
}

// maxCompletionBatch bounds one group commit of completions.
const maxCompletionBatch = 500

// completers commit batches in parallel, so that one batch's commit (and
// its WAL flush) overlaps the next batch's work.
const completers = 1

// complete hands a result to the completer, which commits completions in
// batches (one transaction for whatever is waiting: group commit), each
// still fenced on its own lease epoch.
func (w *Worker) complete(ctx context.Context, x *Execution, result []byte) error {
	c := &completion{x: x, result: result, done: make(chan error, 1)}
	select {
	case <-w.quit: // the worker stopped: no completer any more
		_, err := w.client.Complete(ctx, x.ID, x.LeaseEpoch, result)
		return err
	default:
	}
	select {
	case w.completions <- c:
	case <-w.quit:
		_, err := w.client.Complete(ctx, x.ID, x.LeaseEpoch, result)
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-c.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Worker) completer(ctx context.Context) {
	batch := make([]*completion, 0, maxCompletionBatch)
	for {
		batch = batch[:0]
		select {
		case c := <-w.completions:
			batch = append(batch, c)
		case <-w.quit:
			// Whatever is still queued goes out one by one.
			for {
				select {
				case c := <-w.completions:
					_, err := w.client.Complete(ctx, c.x.ID, c.x.LeaseEpoch, c.result)
					c.done <- err
				default:
					return
				}
			}
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
		items := make([]leases.Completion, len(batch))
		for i, c := range batch {
			items[i] = leases.Completion{ID: c.x.ID, Epoch: c.x.LeaseEpoch, Result: c.result}
		}
		cctx, cancel := context.WithTimeout(ctx, finishTimeout)
		_, errs, err := leases.CompleteMany(cctx, w.client.pool, w.client.limits, items)
		cancel()
		for i, c := range batch {
			switch {
			case err != nil:
				c.done <- err
			default:
				c.done <- errs[i]
			}
		}
	}
}
