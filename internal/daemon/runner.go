package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/sourcegraph/conc"
)

// runner gives a component the start-stop lifecycle: Start launches its
// loops and returns; Stop cancels them and returns once they have all
// ended. Loops stop taking new work when their context ends; work already
// taken runs on the daemon's work context, which outlives a stop by up to
// Config.StopTimeout, so that in-flight transactions finish instead of
// being cut.
type runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	loops  *conc.WaitGroup
}

// start runs each loop in a goroutine of its own. Starting a running
// component is a no-op.
func (r *runner) start(ctx context.Context, loops ...func(ctx context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loops != nil {
		return
	}
	ctx, r.cancel = context.WithCancel(ctx)
	r.loops = &conc.WaitGroup{}
	for _, loop := range loops {
		r.loops.Go(func() { loop(ctx) })
	}
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
// work they have taken. Stopping a component that is not running is a
// no-op.
func (r *runner) Stop() {
	r.mu.Lock()
	cancel, loops := r.cancel, r.loops
	r.cancel, r.loops = nil, nil
	r.mu.Unlock()
	if loops == nil {
		return
	}
	cancel()
	loops.Wait()
}
