package ffd

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/store"
)

// renewer keeps the worker's leases renewed: of the handlers that run
// past their first renewal, and of the outcomes that wait longer than an
// interval to be recorded. Each lease is renewed every heartbeatInterval,
// and every lease due within a quarter of its interval goes in one batch
// (store.RenewMany): one statement for a worker's leases, where a
// heartbeat of its own per execution was one statement per lease. A
// worker of 100 handlers that each run for seconds renewed 100 times a
// TTL/3; under load those renewals were most of what the database did,
// and the ones that came back late lost their leases, so the work was
// done again (docs/scaling.md, "The fault suite on Citus").
//
// A batch also takes the leases due within half their interval, so that
// leases whose renewals fall apart (their handlers started apart) come
// to share one schedule: of two sets of leases due d apart, one falls due
// within half an interval of the other, whose batch takes it along
// early, and both are due an interval after that batch (without, sets
// between a quarter and three quarters of an interval apart stayed apart
// for good). A lease taken along is renewed at most half an interval (a
// sixth of its TTL) early. And a lease joins the renewer half an
// interval before its first renewal is due (renewalLead), so the first
// renewals of handlers that started close together go in one batch too:
// 12 leases renewed 6 times each took 17 transactions (12 for the first
// round), 19 on a busy machine; now 6, on a busy machine too
// (TestWorkerRenewsLeasesTogether).
//
// A lease the batch leaves out (lost, or its row locked by another
// transaction) is renewed on its own, as before: that renewal waits for
// the lock up to the lease's TTL and tells a lost lease, which cancels
// the handler, from a held one. A batch that fails fails each of its
// leases, which are tried again after renewBackoff.
//
// The renewer's goroutine runs while it has leases to keep and ends when
// it has none. Once the executor is aborted (the worker's Stop), it takes
// no lease and the executor waits for it to end (close).
type renewer struct {
	e  *executor
	wg sync.WaitGroup // the loop and its batches in flight

	mu      sync.Mutex
	leases  map[*renewal]struct{}
	running bool
	closed  bool          // the executor was aborted: nothing more is renewed
	kick    chan struct{} // wakes the loop: a lease added or let go
}

// renewal is one lease under renewal.
type renewal struct {
	j    *runningJob
	ctx  context.Context // the run's: once it ends (the lease lost or revoked), renewals stop
	done <-chan struct{} // closed when the lease needs renewing no more

	// Under the renewer's mu.
	next     time.Time // when the next renewal is due
	failures int       // renewals failed in a row
	busy     bool      // a renewal of it is in flight
}

func newRenewer(e *executor) *renewer {
	return &renewer{e: e, leases: map[*renewal]struct{}{}, kick: make(chan struct{}, 1)}
}

// add renews j's lease from now on, every interval, until done is closed
// or ctx ends.
func (r *renewer) add(ctx context.Context, j *runningJob, done <-chan struct{}) {
	l := &renewal{j: j, ctx: ctx, done: done, next: time.Now().Add(renewalLead(j.x))}
	r.mu.Lock()
	if r.closed || l.let() {
		r.mu.Unlock()
		return
	}
	r.leases[l] = struct{}{}
	start := !r.running
	r.running = true
	if start {
		r.wg.Add(1) // under mu, before close can wait
	}
	r.mu.Unlock()
	if start {
		go r.loop()
	} else {
		r.wake()
	}
}

// wake tells the loop to look again: a lease was added, or let go (so
// that the loop ends when it holds none).
func (r *renewer) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// close makes the renewer take no more leases and waits until its loop
// and renewals in flight end: once the executor's context is cut, every
// lease it holds is let go at the loop's next look, which this prompts.
func (r *renewer) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.wake()
	r.wg.Wait()
}

// loop sends each batch of due leases until it holds none.
func (r *renewer) loop() {
	defer r.wg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		due, wait, ok := r.take(time.Now())
		if !ok {
			return
		}
		if len(due) > 0 {
			go func() {
				defer r.wg.Done() // added by take
				r.renew(due)
			}()
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-r.kick:
		}
	}
}

// take lets go of the leases no longer kept and marks busy, and returns,
// those due by now and a quarter of their interval, and when there are
// any, with them those due within half their interval; then how long
// until the next is due. ok is false, and the loop must end, when it holds
// none. A batch to send is counted in wg here, under mu.
func (r *renewer) take(now time.Time) (due []*renewal, wait time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait = time.Hour
	var soon []*renewal
	for l := range r.leases {
		if l.busy {
			continue
		}
		if l.let() {
			delete(r.leases, l)
			continue
		}
		until, interval := l.next.Sub(now), heartbeatInterval(l.j.x)
		switch {
		case until <= interval/4:
			due = append(due, l)
		case until <= interval/2:
			soon = append(soon, l)
			fallthrough
		default:
			wait = min(wait, until)
		}
	}
	if len(r.leases) == 0 {
		r.running = false
		return nil, 0, false
	}
	if len(due) > 0 {
		due = append(due, soon...)
		for _, l := range due {
			l.busy = true
		}
		r.wg.Add(1)
	}
	return due, wait, true
}

// let says the lease needs renewing no more.
func (l *renewal) let() bool {
	select {
	case <-l.done:
		return true
	default:
		return l.ctx.Err() != nil
	}
}

// renew renews due in one batch, then on its own each lease the batch
// left out.
func (r *renewer) renew(due []*renewal) {
	held := make([]store.LeaseRef, len(due))
	timeout := renewTimeout(due[0].j.x)
	for i, l := range due {
		held[i] = store.LeaseRef{ID: l.j.x.ID, Epoch: l.j.x.LeaseEpoch}
		timeout = min(timeout, renewTimeout(l.j.x))
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(r.e.ctx, timeout)
	renewed, err := store.RenewMany(ctx, r.e.client.pool, held)
	cancel()
	var alone sync.WaitGroup
	for i, l := range due {
		switch _, ok := renewed[held[i]]; {
		case ok:
			r.settle(l, sent, nil)
		case err != nil:
			r.settle(l, sent, err)
		default:
			alone.Add(1)
			go func() {
				defer alone.Done()
				r.renewAlone(l)
			}()
		}
	}
	alone.Wait()
	r.wake()
}

// renewAlone renews l's lease by itself: it waits for a row lock another
// transaction holds, up to the lease's TTL, and says whether the lease
// is lost.
func (r *renewer) renewAlone(l *renewal) {
	sent := time.Now()
	ctx, cancel := context.WithTimeout(r.e.ctx, renewTimeout(l.j.x))
	_, err := r.e.client.Renew(ctx, l.j.x.ID, l.j.x.LeaseEpoch)
	cancel()
	r.settle(l, sent, err)
}

// settle records how l's renewal sent at sent went: the next one is due
// an interval after it was sent; a fenced one cancels the handler and
// lets the lease go; a failed one is tried again after renewBackoff.
func (r *renewer) settle(l *renewal, sent time.Time, err error) {
	interval := heartbeatInterval(l.j.x)
	r.mu.Lock()
	defer r.mu.Unlock()
	l.busy = false
	if l.let() { // the outcome was recorded, or the run ended, meanwhile
		delete(r.leases, l)
		return
	}
	switch {
	case err == nil:
		l.failures = 0
		l.next = sent.Add(interval)
	case errors.Is(err, ErrLeaseLost), errors.Is(err, ErrNotFound):
		delete(r.leases, l)
		r.e.log.Info("heartbeat fenced; cancelling handler", jobFields(l.j.x, zap.Error(err))...)
		l.j.cancel(ErrLeaseLost)
	default:
		l.failures++
		next := renewBackoff(max(interval/8, 10*time.Millisecond), interval, l.failures)
		l.next = time.Now().Add(next)
		r.e.log.Warn("heartbeat failed; will retry", jobFields(l.j.x, zap.Int("failures", l.failures), zap.Duration("backoff", next), zap.Error(err))...)
	}
}
