package ffd

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/sourcegraph/conc/panics"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// Batch handler bounds (HandleBatch).
const (
	MaxBatchSize = 10000
	MaxBatchWait = time.Hour
)

// BatchResult is how one execution of a batch ended: a nil Err completes
// it with Result; an Err fails it as a handler's error would (retried
// unless wrapped with Permanent; a SuspendError makes it wait).
type BatchResult struct {
	Result []byte
	Err    error
}

// BatchHandlerFunc runs a batch of executions of one kind. It returns one
// BatchResult per job, in the order of jobs, or an error that fails every
// job of the batch (as a result count that does not match does). ctx is
// cancelled once every job's lease is lost or the worker stops before
// the batch ends; a job whose own lease is lost meanwhile has its result
// dropped, as a handler's would be.
type BatchHandlerFunc func(ctx context.Context, jobs []*Job) ([]BatchResult, error)

// HandleBatch registers fn for executions of kind, run in batches of up
// to size (1..MaxBatchSize): a batch starts when size have come, or maxWait
// (0..MaxBatchWait) after its first one came, whichever is first. Each
// execution keeps its own lease (renewed while it waits for its batch and
// while the batch runs), its own attempt and its own outcome; a batch
// takes one of the worker's slots per execution, so a worker running it
// needs a Concurrency of at least size (NewWorker checks). Bad bounds are
// a *ValidationError NewWorker returns.
func HandleBatch(k *Kinds, kind string, size int, maxWait time.Duration, fn BatchHandlerFunc) {
	switch {
	case size < 1 || size > MaxBatchSize:
		k.refuse(fault.Invalid(ffdtype.KindOutOfRange, "batch max", strconv.Itoa(size), fmt.Sprintf("kind %q: want 1..%d", kind, MaxBatchSize)))
		return
	case maxWait < 0 || maxWait > MaxBatchWait:
		k.refuse(fault.Invalid(ffdtype.KindOutOfRange, "batch max wait", maxWait.String(), fmt.Sprintf("kind %q: want 0..%s", kind, MaxBatchWait)))
		return
	case fn == nil:
		k.refuse(fault.Invalid(ffdtype.KindRequired, "batch handler", "nil", fmt.Sprintf("kind %q: a batch handler is required", kind)))
		return
	}
	b := &batcher{max: size, wait: maxWait, fn: fn}
	if k.add(kind, b.handle) {
		k.batchMax = max(k.batchMax, size)
	}
}

// batcher gathers the executions of one kind into batches. Each
// execution's handler call (run by the executor under its own lease and
// heartbeat) joins the open batch and waits for the batch's outcome, or
// for its own context to end.
type batcher struct {
	max  int
	wait time.Duration
	fn   BatchHandlerFunc

	mu   sync.Mutex
	open *batch
}

// batch is one batch: gathering until started, then run once.
type batch struct {
	jobs    []*Job
	ctxs    []context.Context
	timer   *time.Timer // ends the wait; stopped when the batch fills first
	started bool
	done    chan struct{} // closed when out and err are set
	out     []BatchResult // by position in jobs
	err     error
}

func (b *batcher) handle(ctx context.Context, job *Job) ([]byte, error) {
	b.mu.Lock()
	bt := b.open
	if bt == nil {
		bt = &batch{done: make(chan struct{})}
		b.open = bt
		bt.timer = time.AfterFunc(b.wait, func() { b.start(bt) })
	}
	i := len(bt.jobs)
	bt.jobs, bt.ctxs = append(bt.jobs, job), append(bt.ctxs, ctx)
	full := len(bt.jobs) == b.max
	if full {
		b.open = nil // closed to the next, before it is started
	}
	b.mu.Unlock()
	if full {
		b.start(bt)
	}
	select {
	case <-bt.done:
		if bt.err != nil {
			return nil, bt.err
		}
		return bt.out[i].Result, bt.out[i].Err
	case <-ctx.Done():
		// Lease lost or worker stopped: the executor knows which, and
		// drops or hands back this execution; its batch goes on.
		return nil, context.Cause(ctx)
	}
}

// start closes bt to new executions and runs it, once: whichever comes
// first of its filling and its wait ending.
func (b *batcher) start(bt *batch) {
	b.mu.Lock()
	if bt.started {
		b.mu.Unlock()
		return
	}
	bt.started = true
	if b.open == bt {
		b.open = nil
	}
	b.mu.Unlock()
	// A batch that filled first lets its timer go, rather than be held
	// (with its jobs) until the wait would have ended.
	bt.timer.Stop()
	go b.run(bt)
}

// run runs the batch's live executions (those whose context has not
// ended) through fn, and sets each one's outcome.
func (b *batcher) run(bt *batch) {
	defer close(bt.done)
	bt.out = make([]BatchResult, len(bt.jobs))
	var live []*Job
	var at []int
	for i, c := range bt.ctxs {
		if c.Err() == nil {
			live, at = append(live, bt.jobs[i]), append(at, i)
		}
	}
	if len(live) == 0 {
		return
	}
	ctx, cancel := batchContext(bt.ctxs, at)
	defer cancel()
	var out []BatchResult
	var err error
	var pc panics.Catcher
	pc.Try(func() { out, err = b.fn(ctx, live) })
	switch r := pc.Recovered(); {
	case r != nil:
		bt.err = fmt.Errorf("batch handler panicked: %v", r.Value)
	case err != nil:
		bt.err = err
	case len(out) != len(live):
		bt.err = fmt.Errorf("batch handler returned %d results for %d executions", len(out), len(live))
	default:
		for k, i := range at {
			bt.out[i] = out[k]
		}
	}
}

// batchContext is the context a batch runs under: the values of its
// first live execution's, cancelled once every live execution's context
// has ended (all leases lost, or the worker stopping).
func batchContext(ctxs []context.Context, at []int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(ctxs[at[0]]))
	var mu sync.Mutex
	left := len(at)
	stops := make([]func() bool, len(at))
	for k, i := range at {
		c := ctxs[i]
		stops[k] = context.AfterFunc(c, func() {
			mu.Lock()
			left--
			last := left == 0
			mu.Unlock()
			if last {
				cancel(context.Cause(c))
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(nil)
	}
}
