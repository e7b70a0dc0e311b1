package ffd

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sourcegraph/conc/panics"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/store"
)

// finishTimeout is the least bound of one try at recording how a run
// ended (recordTimeout), independent of the handler's context.
const finishTimeout = 30 * time.Second

// retriable reports whether a try at recording an outcome that failed
// with err is worth another while parent (the executor's or completer's
// context, which only Stop's deadline cuts) lives: what outbox.Transient
// retries (a connection lost, the server restarting or out of
// connections, a lock or serialization conflict), and the try's own
// deadline (recordTimeout), which outbox.Transient leaves to its caller.
func retriable(parent context.Context, err error) bool {
	return err != nil && parent.Err() == nil && (outbox.Transient(err) || errors.Is(err, context.DeadlineExceeded))
}

// recordTimeout bounds one try at recording an outcome of executions
// whose longest lease TTL is ttl: the lease is kept meanwhile, so the try
// may take as long as a lease lasts, and at least finishTimeout. The
// bound is for a connection that hangs; a try cut short is made again.
func recordTimeout(ttl time.Duration) time.Duration { return max(finishTimeout, ttl) }

// renewTimeout bounds one renewal of x's lease: its TTL. A renewal that
// takes longer than a heartbeat interval (a loaded server, a row lock
// held a while) still keeps the lease if it lands before the lease is
// taken away; cutting it at the interval wasted it and its connection
// (a statement that a deadline interrupts closes its connection), which
// is how a slow server became a storm of reconnects and lost leases.
func renewTimeout(x *Execution) time.Duration { return x.LeaseTTL }

// renewBackoff is the pause after the n-th failed renewal in a row
// (n ≥ 1): base, doubling, at most ceiling, then between half and all of
// it at random, so that the workers one fault hit do not come back in
// step. (Recording an outcome waits with outbox.Backoff, 100 ms to 5 s;
// a renewal must come back within its interval.)
func renewBackoff(base, ceiling time.Duration, n int) time.Duration {
	d := ceiling
	if n < 32 {
		d = min(base<<(n-1), ceiling)
	}
	return d/2 + rand.N(d/2+1)
}

// executor is the worker's second part: it runs each claimed execution's
// handler under a heartbeat that renews the lease, cancels a handler
// whose lease is taken away (Revoke, or a heartbeat that is fenced), and
// records how each run ended: a success through the completer, a failure
// itself. It knows which leases the worker holds (Held, Free).
type executor struct {
	client *Client
	cfg    *WorkerConfig
	log    *zap.Logger
	done   *completer
	// onDone runs after each execution's run has ended, with its lane,
	// so that the claim loop can claim into the freed slot.
	onDone func(lane string)
	// onRecorded runs after a success handed to the completer has been
	// recorded (or refused), with its lane: only then has a concurrency
	// key's running count gone down, so a claim that flow control held
	// back when the run ended may find room now.
	onRecorded func(lane string)

	mu    sync.Mutex
	ctx   context.Context // the runs' base; cut by abort
	abort context.CancelFunc
	// active holds the running handlers by lease: an execution revoked
	// (back to pending) can be claimed again, by this worker too, while
	// its old handler has not yet seen the revocation; the two runs are
	// two leases, each revoked, counted and removed on its own.
	active map[store.LeaseRef]*runningJob
	jobs   sync.WaitGroup // handlers
	// renewals renews the leases of handlers that run past a renewal
	// interval, and of outcomes not yet recorded, in batches.
	renewals *renewer
}

type runningJob struct {
	x        *Execution
	job      *Job // the handler's view, with what it spawned
	cancel   context.CancelCauseFunc
	handedIn bool // Stop already failed it back; the handler's result is moot
}

// newExecutor builds an executor that records successes through done.
func newExecutor(client *Client, cfg *WorkerConfig, log *zap.Logger, done *completer) *executor {
	e := &executor{client: client, cfg: cfg, log: log, done: done, onDone: func(string) {}, onRecorded: func(string) {},
		active: map[store.LeaseRef]*runningJob{}}
	e.renewals = newRenewer(e)
	return e
}

// Start sets the context runs are based on: its values reach handlers and
// database calls, its cancellation does not (Stop's deadline does).
func (e *executor) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.ctx == nil {
		e.ctx, e.abort = context.WithCancel(context.WithoutCancel(ctx))
	}
	return nil
}

// Stop waits for running handlers until ctx ends. It returns nil when
// every handler finished, ctx's error otherwise: the handlers still
// running are left to HandBack. It starts nothing new; Run after Stop is
// the caller's mistake.
func (e *executor) Stop(ctx context.Context) error {
	finished := make(chan struct{})
	go func() { e.jobs.Wait(); close(finished) }()
	select {
	case <-finished:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Abort cuts every database call the executor still makes: the worker's
// Stop has reached its deadline.
func (e *executor) Abort() {
	e.mu.Lock()
	abort := e.abort
	e.mu.Unlock()
	if abort != nil {
		abort()
	}
	e.renewals.close()
}

// Free is how many more executions the worker may run now.
func (e *executor) Free() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cfg.Concurrency - len(e.active)
}

// Run runs x's handler in a goroutine of its own.
func (e *executor) Run(x *Execution) {
	ctx, cancel := context.WithCancelCause(e.ctx)
	j := &runningJob{x: x, cancel: cancel}
	lease := store.LeaseRef{ID: x.ID, Epoch: x.LeaseEpoch}
	e.mu.Lock()
	e.active[lease] = j
	e.mu.Unlock()
	e.jobs.Add(1)
	go func() {
		defer e.jobs.Done()
		defer cancel(nil)
		e.execute(ctx, j)
		e.mu.Lock()
		delete(e.active, lease)
		e.mu.Unlock()
		e.onDone(x.Lane)
	}()
}

// Held lists the leases of the executions running now.
func (e *executor) Held() []store.LeaseRef {
	e.mu.Lock()
	defer e.mu.Unlock()
	held := make([]store.LeaseRef, 0, len(e.active))
	for lease := range e.active {
		held = append(held, lease)
	}
	return held
}

// Revoke cancels the handler holding id's lease at epoch (0: at any
// epoch, for an execution that ended for good), if it still runs: the
// lease was taken away (cancelled, expired, revoked by an operator, or
// lost to a sibling), and the handler stops at once rather than at its
// next heartbeat.
func (e *executor) Revoke(id ExecutionID, epoch int64) {
	var revoked []*runningJob
	e.mu.Lock()
	if epoch != 0 {
		if j := e.active[store.LeaseRef{ID: id, Epoch: epoch}]; j != nil {
			revoked = append(revoked, j)
		}
	} else {
		for lease, j := range e.active {
			if lease.ID == id {
				revoked = append(revoked, j)
			}
		}
	}
	e.mu.Unlock()
	for _, j := range revoked {
		e.log.Info("lease revoked; cancelling handler", jobFields(j.x)...)
		j.cancel(ErrLeaseLost)
	}
}

// RecheckLeases cancels the handler of every lease held that the
// database says is gone: for when ff_revoke notifications may have been
// missed. A failure is logged; the heartbeat still finds the loss.
func (e *executor) RecheckLeases(ctx context.Context) {
	held := e.Held()
	if len(held) == 0 {
		return
	}
	lost, err := store.LostLeases(ctx, e.client.pool, held)
	if err != nil {
		e.log.Warn("check held leases after reconnecting; heartbeats will", zap.Error(err))
		return
	}
	for _, l := range lost {
		e.Revoke(l.ID, l.Epoch)
	}
}

// HandBack cancels every running handler (cause ErrWorkerStopped) and
// gives its lease back, all in one statement: pending again with no
// backoff, or failed when it has no attempt left.
func (e *executor) HandBack(ctx context.Context) {
	e.mu.Lock()
	var held []leases.Held
	var jobs []*runningJob
	for _, j := range e.active {
		if j.handedIn {
			continue
		}
		j.handedIn = true
		j.cancel(ErrWorkerStopped)
		held = append(held, leases.Held{ID: j.x.ID, Epoch: j.x.LeaseEpoch})
		jobs = append(jobs, j)
	}
	e.mu.Unlock()
	if len(held) == 0 {
		return
	}
	requeued, failed, err := leases.HandBack(ctx, e.client.pool, held, "worker stopped before the handler finished")
	if err != nil {
		// The leases lapse after their TTL and the sweep retries them.
		e.log.Error("hand back executions on stop; they will be retried when their leases lapse", zap.Int("executions", len(held)), zap.Error(err))
		return
	}
	e.log.Info("executions handed back on stop", zap.Int("requeued", requeued), zap.Int("failed", failed), zap.Int("lease_moved_on", len(held)-requeued-failed))
	for _, j := range jobs {
		if ce := e.log.Check(zap.DebugLevel, "execution handed back"); ce != nil {
			ce.Write(jobFields(j.x)...)
		}
	}
}

func (e *executor) execute(ctx context.Context, j *runningJob) {
	x := j.x
	if ce := e.log.Check(zap.DebugLevel, "execution claimed"); ce != nil {
		ce.Write(jobFields(x)...)
	}
	ctx, span := e.client.tracing.start(ctx, x)
	start := time.Now()
	e.cfg.Metrics.running(x.Lane, 1)
	result, herr := e.runHandler(ctx, j)
	e.cfg.Metrics.running(x.Lane, -1)
	e.finish(ctx, j, result, herr, func(outcome string) {
		e.cfg.Metrics.handled(x.Lane, x.Kind, outcome, time.Since(start))
		span.end(outcome, herr)
	})
}

// runHandler runs the handler while heartbeating its lease; a panic is
// the handler's error.
func (e *executor) runHandler(ctx context.Context, j *runningJob) (result []byte, herr error) {
	x := j.x
	hbDone := make(chan struct{})
	// The heartbeat is a timer until its first renewal is due: most
	// handlers end before that, and a goroutine with a timer of its own
	// for each was 8% of a busy worker's CPU (pprof). Once it fires, the
	// lease joins the worker's renewer, which renews it a renewalLead
	// later and every interval after, in one batch with the other leases
	// due then, until
	// hbDone is closed: a renewal in flight (it may take up to the TTL on
	// a slow server) finishes without holding up the result.
	hb := time.AfterFunc(heartbeatInterval(x)-renewalLead(x), func() { e.renewals.add(ctx, j, hbDone) })
	var pc panics.Catcher
	j.job = &Job{Execution: x, client: e.client}
	pc.Try(func() { result, herr = e.cfg.Handler(ctx, j.job) })
	close(hbDone)
	if !hb.Stop() {
		e.renewals.wake() // let the lease go now, not at its next renewal
	}
	if r := pc.Recovered(); r != nil {
		herr = fmt.Errorf("handler panicked: %v", r.Value)
		e.log.Error("handler panicked", jobFields(x, zap.Any("panic", r.Value), zap.String("stack", string(r.Stack)))...)
	}
	return result, herr
}

// finish records the handler's outcome and reports which it was (stopped,
// lease_lost, completed, retried or failed). A success is handed to the
// completer and reported when its batch commits: the handler's slot is
// free at once, so the worker claims again while the result is written.
func (e *executor) finish(ctx context.Context, j *runningJob, result []byte, herr error, report func(outcome string)) {
	x := j.x
	e.mu.Lock()
	handedIn := j.handedIn
	e.mu.Unlock()
	if handedIn {
		report(HandlerStopped)
		return
	}
	if cause := context.Cause(ctx); errors.Is(cause, ErrLeaseLost) {
		// Expected when the engine cancels a losing sibling or an operator
		// revokes: the lease moved on and the result would be refused.
		e.log.Info("lease lost; handler result dropped", jobFields(x)...)
		report(HandlerLeaseLost)
		return
	}
	var wait *SuspendError
	if errors.As(herr, &wait) {
		report(e.suspend(j, wait))
		return
	}
	if spawn := j.job.spawned(); herr == nil && spawn != nil {
		report(e.completeSpawn(j, result, spawn))
		return
	}
	if herr == nil {
		// The lease is renewed until the result is recorded, not only
		// while the handler runs: a batch that commits slowly (a busy
		// server, a distributed Postgres committing in two phases) or
		// is tried again must not let it lapse, or the execution runs
		// again elsewhere and this result is refused. The slot is free
		// meanwhile.
		release := e.keepLease(j)
		e.done.Complete(x, result, x.FlowID == nil, func(_ *Ending, err error) {
			release()
			e.onRecorded(x.Lane)
			e.logFinish(x, "completed", err)
			if errors.Is(err, ErrLeaseLost) {
				report(HandlerLeaseLost)
				return
			}
			report(HandlerCompleted)
		})
		return
	}
	report(e.fail(j, herr))
}

// completeSpawn records a result with the steps its handler spawned, in
// one transaction of its own (not the completer's batches: a spawn may
// be large, and fails alone), renewing the lease until it is recorded.
func (e *executor) completeSpawn(j *runningJob, result []byte, spawn *SpawnParams) string {
	x := j.x
	var spawned *Spawned
	err := e.record(j, "spawn", func(ctx context.Context) (err error) {
		_, spawned, err = e.client.CompleteAndSpawn(ctx, x.ID, x.LeaseEpoch, result, *spawn)
		return err
	})
	if err != nil {
		var ve *ValidationError
		var ce *ConflictError
		if errors.As(err, &ve) || errors.As(err, &ce) {
			// The flow cannot take this spawn (a name taken, an edge into
			// a step that started): the attempt fails, and a retry may
			// spawn otherwise.
			return e.fail(j, fmt.Errorf("spawn %d steps: %w", len(spawn.Nodes), err))
		}
		e.logFinish(x, "completed", err)
		if errors.Is(err, ErrLeaseLost) {
			return HandlerLeaseLost
		}
		return HandlerFailed
	}
	e.logFinish(x, "completed", nil, zap.Int("spawned", len(spawned.Executions)))
	return HandlerCompleted
}

// suspend records the wait a handler asked for.
func (e *executor) suspend(j *runningJob, wait *SuspendError) string {
	x := j.x
	var out *Suspended
	err := e.record(j, "wait", func(ctx context.Context) (err error) {
		out, err = e.client.Suspend(ctx, x.ID, x.LeaseEpoch, wait.Params)
		return err
	})
	if err != nil {
		var ve *ValidationError
		if errors.As(err, &ve) {
			// The handler asked for a wait that cannot be: a bug to
			// fix, recorded as the attempt's failure.
			return e.fail(j, Permanent(fmt.Errorf("%s: %w", wait.Error(), err)))
		}
		e.logFinish(x, "suspended", err)
		if errors.Is(err, ErrLeaseLost) {
			return HandlerLeaseLost
		}
		return HandlerFailed
	}
	if ce := e.log.Check(zap.InfoLevel, "execution waits"); ce != nil {
		ce.Write(jobFields(x, zap.String("wait", wait.Error()), zap.Time("run_at", out.RunAt), zap.Bool("woken", out.Woken))...)
	}
	return HandlerSuspended
}

// fail records a handler's error: retried or failed.
func (e *executor) fail(j *runningJob, herr error) string {
	x := j.x
	// The handler's context may be cancelled (lease lost is handled by
	// finish; a cancelled parent is not ours to obey here): record the
	// outcome on the executor's own context, which only Stop's deadline
	// cuts.
	var perm *PermanentError
	retry := !errors.As(herr, &perm)
	var out *Ending
	err := e.record(j, "failure", func(ctx context.Context) (err error) {
		out, err = e.client.Fail(ctx, x.ID, x.LeaseEpoch, FailParams{Error: leases.CleanText(herr.Error(), MaxErrorBytes), Retryable: retry})
		return err
	})
	state := "failed"
	if out != nil {
		state = string(out.State)
	}
	if err != nil {
		e.logFinish(x, state, err, zap.NamedError("handler_error", herr))
		if errors.Is(err, ErrLeaseLost) {
			return HandlerLeaseLost
		}
		return HandlerFailed
	}
	// The handler's error is the application's to see: the worker
	// recorded it, and says whether the execution will be retried.
	e.log.Warn("handler failed", jobFields(x, zap.String("state", state), zap.Bool("retrying", state == string(StatePending)),
		zap.NamedError("handler_error", herr))...)
	if state == string(StatePending) {
		return HandlerRetried
	}
	return HandlerFailed
}

func (e *executor) logFinish(x *Execution, state string, err error, more ...zap.Field) {
	switch {
	case err == nil:
		if ce := e.log.Check(zap.DebugLevel, "execution "+state); ce != nil {
			ce.Write(jobFields(x, more...)...)
		}
	case errors.Is(err, ErrLeaseLost):
		e.log.Warn("lease lost before the result was recorded", jobFields(x, append(more, zap.Error(err))...)...)
	default:
		// The lease will lapse and the execution be retried.
		e.log.Error("record execution result", jobFields(x, append(more, zap.Error(err))...)...)
	}
}

// keepLease renews j's lease while how its run ended is being recorded,
// until the returned release is called. Most outcomes are recorded well
// within a renewal interval, so renewals start only if this one is not:
// a timer, not a goroutine, for each outcome. The first comes one
// interval after the handler's end, at most two after its last renewal.
func (e *executor) keepLease(j *runningJob) (release func()) {
	recorded := make(chan struct{})
	keep := time.AfterFunc(heartbeatInterval(j.x)-renewalLead(j.x), func() { e.renewals.add(e.ctx, j, recorded) })
	return func() {
		close(recorded)
		if !keep.Stop() {
			e.renewals.wake()
		}
	}
}

// record runs op, a call that records how j's run ended, keeping the
// lease meanwhile, until op returns anything but a transient error (each
// try bounded by recordTimeout, a backoff between tries) or Stop's
// deadline cuts the executor off: an outcome given up is work done again
// or a failure counted twice, so a slow or restarting database is
// waited out. A try whose commit went through though its answer was
// lost with its connection is answered by the next: a completion or a
// failure with its stored outcome (they are idempotent), a wait or a
// spawn as a lost lease (what it wrote stands).
func (e *executor) record(j *runningJob, what string, op func(ctx context.Context) error) error {
	release := e.keepLease(j)
	defer release()
	retry := outbox.NewBackoff()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(e.ctx, recordTimeout(j.x.LeaseTTL))
		err := op(ctx)
		cancel()
		if !retriable(e.ctx, err) {
			return err
		}
		e.log.Warn("record "+what+" failed; retrying, the lease kept meanwhile",
			jobFields(j.x, zap.Int("try", try), zap.Duration("retry_in", retry.Next()), zap.Error(err))...)
		if !retry.Wait(e.ctx) {
			return err
		}
	}
}

// heartbeatInterval is how often x's lease is renewed: a third of its TTL.
func heartbeatInterval(x *Execution) time.Duration { return max(x.LeaseTTL/3, 10*time.Millisecond) }

// renewalLead is how long before its first renewal is due a lease joins
// the renewer (half its interval), so that leases whose first renewals
// fall due close together go in one batch: joined at the time they were
// due, each went in a batch of its own as it came, 12 leases whose
// handlers started within 300 ms in 12 transactions.
func renewalLead(x *Execution) time.Duration { return heartbeatInterval(x) / 2 }
