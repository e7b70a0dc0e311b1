package ffd

import (
	"context"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/store"
)

// maxCompletionBatch bounds one group commit of completions.
const maxCompletionBatch = 500

// completion is a handler's result waiting for the completer.
type completion struct {
	x      *Execution
	result []byte
	solo   bool                 // the execution is in no flow (leases.Completion.Solo)
	done   func(*Ending, error) // called once, when the result is recorded (its ending) or refused
}

// completer is the worker's third part: it records handlers' results in
// batches, one transaction for whatever is waiting (group commit), each
// result still fenced on its own lease epoch, and tells each handler's
// finisher how its result fared. The executor hands it results; nothing
// else writes a success.
type completer struct {
	client      *Client
	lockTimeout time.Duration
	metrics     *WorkerMetrics
	log         *zap.Logger

	queue chan *completion

	mu    sync.Mutex
	ctx   context.Context // every database call; cut by Stop's deadline
	abort context.CancelFunc
	quit  chan struct{} // closed by Stop: flush and end
	done  chan struct{} // closed once the batch loop and lone retries end
	wg    conc.WaitGroup
}

// newCompleter builds a completer whose queue holds capacity results.
func newCompleter(client *Client, lockTimeout time.Duration, metrics *WorkerMetrics, log *zap.Logger, capacity int) *completer {
	return &completer{client: client, lockTimeout: lockTimeout, metrics: metrics, log: log,
		queue: make(chan *completion, max(capacity, maxCompletionBatch)), quit: make(chan struct{})}
}

// Start runs the batch loop; ctx's values reach the database calls, its
// cancellation does not (Stop does). A second Start is a no-op.
func (c *completer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		return nil
	}
	c.ctx, c.abort = context.WithCancel(context.WithoutCancel(ctx))
	c.done = make(chan struct{})
	c.wg.Go(c.run)
	go func(done chan struct{}) { c.wg.Wait(); close(done) }(c.done)
	return nil
}

// Stop records what is queued and returns once every result is recorded
// or refused. When ctx ends first, the calls still waiting are cut (their
// results are refused with the context's error) and Stop returns ctx's
// error once they have returned. A result handed over while Stop flushes
// is recorded on the caller's goroutine; one handed over after Stop has
// returned is refused with context.Canceled: nothing the completer does
// outlives its Stop (the execution's lease lapses and it is retried).
func (c *completer) Stop(ctx context.Context) error {
	c.mu.Lock()
	done, abort := c.done, c.abort
	select {
	case <-c.quit:
	default:
		close(c.quit)
	}
	c.mu.Unlock()
	if done == nil {
		return nil
	}
	var err error
	select {
	case <-done:
	case <-ctx.Done():
		err = ctx.Err()
		abort()
		<-done
	}
	abort()
	return err
}

// Complete hands a result over and returns once it is queued; when the
// queue is full (the completer is behind by a whole batch, or a whole
// worker's concurrency if that is more) it waits, holding the handler's
// slot, so that a slow database slows claims rather than piling results
// up in memory. A queue of one batch lets the next batch gather while
// one commits.
//
// solo says the caller knows x is in no flow; a caller that does not
// know passes false (the daemon then looks at its event).
func (c *completer) Complete(x *Execution, result []byte, solo bool, done func(*Ending, error)) {
	item := &completion{x: x, result: result, solo: solo, done: done}
	select {
	case <-c.quit: // stopped: no batch loop any more
		c.completeAlone(item) // on the caller's goroutine: the batch loop is gone
		return
	default:
	}
	select {
	case c.queue <- item:
	case <-c.quit:
		c.completeAlone(item) // on the caller's goroutine: the batch loop is gone
	case <-c.ctx.Done(): // Stop's deadline came while the queue was full
		item.done(nil, c.ctx.Err())
	}
}

// run commits batches until quit, then flushes everything still queued.
func (c *completer) run() {
	batch := make([]*completion, 0, maxCompletionBatch)
	for {
		batch = batch[:0]
		quitting := false
		select {
		case item := <-c.queue:
			batch = append(batch, item)
		case <-c.quit:
			quitting = true
		}
	fill:
		for len(batch) < maxCompletionBatch {
			select {
			case item := <-c.queue:
				batch = append(batch, item)
			default:
				break fill
			}
		}
		if len(batch) > 0 {
			c.commit(batch)
		}
		if quitting && len(c.queue) == 0 {
			return
		}
	}
}

// commit completes a batch in one transaction. A batch that failed for
// a transient reason (a connection lost, a deadline on a loaded server)
// is tried again after a backoff, on the loop, so that a slow database
// slows the queue (and through it the claims) instead of dropping
// results: a result dropped is work done again. A batch that waited too
// long for a row lock is split: each completion is retried on its own,
// in the background, so the loop goes back to new completions at once
// and only the completion behind the lock keeps waiting. So is each
// completion whose own read failed for a transient reason.
func (c *completer) commit(batch []*completion) {
	items := make([]leases.Completion, len(batch))
	var ttl time.Duration
	lockTimeout := c.lockTimeout
	for i, item := range batch {
		items[i] = leases.Completion{ID: item.x.ID, Epoch: item.x.LeaseEpoch, Result: item.result, Solo: item.solo}
		ttl = max(ttl, item.x.LeaseTTL)
		lockTimeout = lockWithin(lockTimeout, item.x.LeaseTTL)
	}
	var ends []*Ending
	var errs []error
	retry := outbox.NewBackoff()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(c.ctx, recordTimeout(ttl))
		start := time.Now()
		var err error
		ends, errs, err = leases.CompleteMany(ctx, c.client.pool, c.client.limits, items, lockTimeout)
		c.metrics.committed(time.Since(start))
		cancel()
		if err == nil {
			break
		}
		if store.IsLockTimeout(err) {
			c.log.Warn("completion batch waited too long for a lock; completing each on its own", zap.Int("completions", len(batch)))
			for _, item := range batch {
				c.wg.Go(func() { c.completeAlone(item) })
			}
			return
		}
		if !c.again(retry, try, len(batch), err) {
			for _, item := range batch {
				item.done(nil, err)
			}
			return
		}
	}
	for i, item := range batch {
		if retriable(c.ctx, errs[i]) {
			c.wg.Go(func() { c.completeAlone(item) })
			continue
		}
		item.done(ends[i], errs[i])
	}
}

// again reports whether a try that failed with err is to be made again
// (retriable), after waiting out retry's backoff.
func (c *completer) again(retry *outbox.Backoff, try, completions int, err error) bool {
	if !retriable(c.ctx, err) {
		return false
	}
	c.log.Warn("record completions failed; retrying, the leases kept meanwhile",
		zap.Int("completions", completions), zap.Int("try", try), zap.Duration("retry_in", retry.Next()), zap.Error(err))
	return retry.Wait(c.ctx)
}

// completeAlone records one completion in a transaction of its own,
// trying again after a lock timeout or any other transient failure,
// until it is recorded or refused, or Stop cuts the completer off.
func (c *completer) completeAlone(item *completion) {
	one := []leases.Completion{{ID: item.x.ID, Epoch: item.x.LeaseEpoch, Result: item.result, Solo: item.solo}}
	retry := outbox.NewBackoff()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(c.ctx, recordTimeout(item.x.LeaseTTL))
		ends, errs, err := leases.CompleteMany(ctx, c.client.pool, c.client.limits, one, lockWithin(c.lockTimeout, item.x.LeaseTTL))
		cancel()
		var end *Ending
		if err == nil {
			end, err = ends[0], errs[0]
		}
		if !c.again(retry, try, 1, err) {
			item.done(end, err)
			return
		}
	}
}

// lockWithin bounds a completion's row-lock wait by a quarter of the
// lease of an execution it completes (ttl; 0: unknown): while it waits
// for a lock held elsewhere (a flow's, by a daemon that froze) it holds
// the execution's own row, and the worker's renewal of that lease waits
// behind it; a wait shorter than the lease lets the renewal land between
// tries, so the lease outlives a lock held for longer than it.
func lockWithin(lockTimeout, ttl time.Duration) time.Duration {
	if ttl <= 0 {
		return lockTimeout
	}
	if lockTimeout <= 0 || ttl/4 < lockTimeout {
		return max(ttl/4, 10*time.Millisecond)
	}
	return lockTimeout
}
