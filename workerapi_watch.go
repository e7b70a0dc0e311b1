package ffd

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// maxWatched bounds the leases one watch names.
const maxWatched = 1000

// revokeHub hands the revocations the worker API hears on ff_revoke to
// the watch calls waiting on those leases: what tells a worker in another
// language at once that its execution was cancelled, as ff_revoke tells a
// Go worker.
type revokeHub struct {
	mu      sync.Mutex
	waiters map[ExecutionID]map[*watcher]int64 // the epoch each watches
}

// watcher is one watch call: the leases of it that were revoked.
type watcher struct {
	wake chan struct{} // a token once hit is not empty
	mu   sync.Mutex
	hit  []ExecutionID
}

// watch registers w for leases; the returned func unregisters it.
func (h *revokeHub) watch(w *watcher, leases []apiFence) func() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.waiters == nil {
		h.waiters = map[ExecutionID]map[*watcher]int64{}
	}
	for _, l := range leases {
		if h.waiters[l.ID] == nil {
			h.waiters[l.ID] = map[*watcher]int64{}
		}
		h.waiters[l.ID][w] = l.Epoch
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, l := range leases {
			delete(h.waiters[l.ID], w)
			if len(h.waiters[l.ID]) == 0 {
				delete(h.waiters, l.ID)
			}
		}
	}
}

// revoked tells the watchers of id's lease at epoch (0: whichever) that
// it is gone.
func (h *revokeHub) revoked(id ExecutionID, epoch int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for w, held := range h.waiters[id] {
		if epoch != 0 && epoch != held {
			continue
		}
		w.mu.Lock()
		w.hit = append(w.hit, id)
		w.mu.Unlock()
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}

type (
	apiWatch struct {
		Leases []apiFence `json:"leases"`
		WaitMS int64      `json:"wait_ms"`
	}
	apiWatched struct {
		Revoked []ExecutionID `json:"revoked"`
	}
)

// watchLeases answers the leases no longer held, at once when any is
// already lost, else as soon as ff_revoke names one (cancelled, revoked
// by an operator, expired), or after wait_ms with none. It is a hint, as
// ff_revoke is to a Go worker: the worker confirms with a renew, whose
// lease_lost is the fenced answer.
func (a *WorkerAPI) watchLeases(ctx context.Context, in *apiWatch) (*apiWatched, error) {
	wait := time.Duration(in.WaitMS) * time.Millisecond
	if in.WaitMS < 0 || wait > a.wait {
		return nil, fault.Invalid(KindOutOfRange, "wait_ms", fmt.Sprint(in.WaitMS), fmt.Sprintf("want 0 to %d", a.wait.Milliseconds()))
	}
	if len(in.Leases) == 0 || len(in.Leases) > maxWatched {
		return nil, fault.Invalid(KindOutOfRange, "leases", fmt.Sprint(len(in.Leases)), fmt.Sprintf("want 1 to %d leases", maxWatched))
	}
	w := &watcher{wake: make(chan struct{}, 1)}
	defer a.revokes.watch(w, in.Leases)()
	// A lease taken away before the watch began sent its ff_revoke to
	// nobody: read them once, now that later ones will be heard.
	refs := make([]store.LeaseRef, len(in.Leases))
	for i, l := range in.Leases {
		if err := leases.ValidateID("leases.id", l.ID); err != nil {
			return nil, err
		}
		refs[i] = store.LeaseRef{ID: l.ID, Epoch: l.Epoch}
	}
	lost, err := store.LostLeases(ctx, a.c.pool, refs)
	if err != nil {
		return nil, err
	}
	if len(lost) > 0 {
		out := &apiWatched{Revoked: make([]ExecutionID, len(lost))}
		for i, l := range lost {
			out.Revoked[i] = l.ID
		}
		return out, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-w.wake:
	case <-t.C:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return &apiWatched{Revoked: append([]ExecutionID{}, w.hit...)}, nil
}
