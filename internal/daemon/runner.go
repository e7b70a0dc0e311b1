package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
)

// runner gives a component the lifecycle of every ffd component:
// Start(ctx) launches its loops and returns; Stop(ctx) cancels them and
// returns once they have all ended, or with ctx's error when ctx ends
// first (a later Stop waits again). Loops stop taking new work when their context ends; work already
// taken runs on the daemon's work context, which outlives a stop by up to
// Config.StopTimeout, so that in-flight transactions finish instead of
// being cut.
type runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed once the loops have ended
}

// start runs each loop in a goroutine of its own. Starting a running
// component is a no-op.
func (r *runner) start(ctx context.Context, loops ...func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done != nil {
		return nil
	}
	ctx, r.cancel = context.WithCancel(ctx)
	var wg conc.WaitGroup
	for _, loop := range loops {
		wg.Go(func() { loop(ctx) })
	}
	r.done = make(chan struct{})
	go func(done chan struct{}) { wg.Wait(); close(done) }(r.done)
	return nil
}

// every returns a loop that calls fn every interval (after the first
// interval; at once too when now) until its context ends.
func every(interval time.Duration, now bool, fn func(ctx context.Context)) func(ctx context.Context) {
	return func(ctx context.Context) {
		t := time.NewTicker(interval)
		defer t.Stop()
		if now {
			fn(ctx)
		}
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			fn(ctx)
		}
	}
}

// times returns n copies of loop, for a pool of n workers.
func times(n int, loop func(ctx context.Context)) []func(ctx context.Context) {
	loops := make([]func(context.Context), n)
	for i := range loops {
		loops[i] = loop
	}
	return loops
}

// Stop cancels the component's loops and waits for them, and so for the
// work they have taken, until ctx ends. Stopping a component that is not
// running is a no-op.
func (r *runner) Stop(ctx context.Context) error {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
	case <-ctx.Done():
		return ctx.Err()
	}
	r.mu.Lock()
	if r.done == done {
		r.cancel, r.done = nil, nil
	}
	r.mu.Unlock()
	return nil
}
