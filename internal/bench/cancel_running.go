package bench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flowfabric/ffd"
)

// cancelRunning measures how long a running handler takes to learn that
// its execution was cancelled: from just before Cancel is called to the
// moment the handler's context is done. The lease TTL is an hour, so a
// heartbeat cannot be what tells it; the ff_revoke notification is.
func cancelRunning(ctx context.Context, env *Env, p Params, r *Report) error {
	c, err := env.client()
	if err != nil {
		return err
	}
	lane := env.lane("cancel-running")
	n := p.Cancels
	var mu sync.Mutex
	started := map[ffd.ExecutionID]chan time.Time{}
	ready := make(chan ffd.ExecutionID, n)
	stop, err := env.startWorker(ctx, []string{lane}, n, func(hctx context.Context, j *ffd.Job) ([]byte, error) {
		done := make(chan time.Time, 1)
		mu.Lock()
		started[j.ID] = done
		mu.Unlock()
		ready <- j.ID
		<-hctx.Done()
		done <- time.Now()
		return nil, context.Cause(hctx)
	})
	if err != nil {
		return err
	}
	defer stop()
	for range n {
		if _, err := c.Create(ctx, ffd.CreateParams{Lane: lane, LeaseTTL: time.Hour}); err != nil {
			return err
		}
	}
	var ids []ffd.ExecutionID
	for len(ids) < n {
		select {
		case id := <-ready:
			ids = append(ids, id)
		case <-time.After(time.Minute):
			return fmt.Errorf("%d of %d handlers started", len(ids), n)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	lat := make([]time.Duration, 0, n)
	for _, id := range ids {
		mu.Lock()
		done := started[id]
		mu.Unlock()
		t0 := time.Now()
		if _, err := c.Cancel(ctx, id, "bench", ""); err != nil {
			return err
		}
		select {
		case t1 := <-done:
			lat = append(lat, t1.Sub(t0))
		case <-time.After(time.Minute):
			return fmt.Errorf("handler of %s still running a minute after its cancel", id)
		}
	}
	ps := percentiles(lat, 50, 99)
	r.Figures["cancel_to_handler_ms"] = map[string]float64{"p50": ms(ps[0]), "p99": ms(ps[1])}
	r.Targets = append(r.Targets, target("cancel_to_handler_p99_ms", "<= 100", ms(ps[1]), "ms", ms(ps[1]) <= 100))
	return env.checkInvariants(ctx)
}
