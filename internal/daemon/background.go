package daemon

import (
	"context"
	"errors"
	"sync"
)

// background is the state of a daemon started with Start.
type background struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan error
}

// ErrStarted is returned by Start on a daemon already started.
var ErrStarted = errors.New("daemon: already started")

// Start runs the daemon in the background, as a program embedding it
// does, and returns once it is ready. If Run returns first, Start returns
// its error; if ctx ends first, the daemon is stopped and Start returns
// ctx's error. Once started, the daemon runs until Stop or until ctx ends.
func (d *Daemon) Start(ctx context.Context) error {
	d.bg.mu.Lock()
	if d.bg.done != nil {
		d.bg.mu.Unlock()
		return ErrStarted
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	d.bg.cancel, d.bg.done = cancel, done
	d.bg.mu.Unlock()
	go func() { done <- d.Run(runCtx) }()
	select {
	case <-d.becameReady:
		return nil
	case err := <-done:
		done <- err // for Stop
		_ = d.Stop(context.Background())
		switch {
		case err != nil:
			return err
		case ctx.Err() != nil:
			return ctx.Err() // Run returns nil when stopped while starting
		}
		return errors.New("daemon: stopped before it was ready")
	case <-ctx.Done():
		_ = d.Stop(context.Background())
		return ctx.Err()
	}
}

// Stop ends a daemon started with Start and waits for it: work under way
// gets up to Config.StopTimeout to finish. It returns Run's error, or
// ctx's when ctx ends first (the daemon still stops, within its
// StopTimeout, and a later Stop waits for it again). Stopping a daemon
// that was not started is a no-op.
func (d *Daemon) Stop(ctx context.Context) error {
	d.bg.mu.Lock()
	cancel, done := d.bg.cancel, d.bg.done
	d.bg.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case err := <-done:
		done <- err // for any other Stop waiting
		d.bg.mu.Lock()
		if d.bg.done == done {
			d.bg.cancel, d.bg.done = nil, nil
		}
		d.bg.mu.Unlock()
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}
