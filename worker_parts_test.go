package ffd

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// parts is one worker's three parts, built as NewWorker builds them but
// started and stopped by each test on its own.
type parts struct {
	t      *testing.T
	ctx    context.Context
	client *Client
	cfg    *WorkerConfig
	done   *completer
	exec   *executor
	claims *claimer
}

func setupParts(t *testing.T, concurrency int, handler HandlerFunc) *parts {
	t.Helper()
	db := testdb.New(t)
	client, err := NewClient(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &WorkerConfig{Lanes: []string{"parts"}, Handler: handler, Concurrency: concurrency, PollInterval: 50 * time.Millisecond,
		HandBackTimeout: time.Second, CompletionLockTimeout: time.Second}
	p := &parts{t: t, ctx: context.Background(), client: client, cfg: cfg}
	p.done = newCompleter(client, cfg.CompletionLockTimeout, nil, zap.NewNop(), concurrency)
	p.exec = newExecutor(client, cfg, zap.NewNop(), p.done)
	p.claims = newClaimer(client, cfg, "parts/1", zap.NewNop(), p.exec)
	return p
}

// create makes n pending executions in the parts' lane.
func (p *parts) create(n int) []ExecutionID {
	p.t.Helper()
	ids := make([]ExecutionID, n)
	for i := range ids {
		res, err := p.client.Create(p.ctx, CreateParams{Lane: "parts", LeaseTTL: 3 * time.Second})
		if err != nil {
			p.t.Fatal(err)
		}
		ids[i] = res.Execution.ID
	}
	return ids
}

// claim claims up to n executions by hand, as the claim loop would.
func (p *parts) claim(n int) []*Execution {
	p.t.Helper()
	xs, err := p.client.Claim(p.ctx, ClaimParams{Lane: "parts", Worker: "parts/1", Max: n})
	if err != nil {
		p.t.Fatal(err)
	}
	return xs
}

// waitState waits until id is in want.
func (p *parts) waitState(id ExecutionID, want State) {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		x, err := p.client.Get(p.ctx, id)
		if err != nil {
			p.t.Fatal(err)
		}
		if x.State == want {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("execution %s is %s after 30 s; want %s", id, x.State, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (p *parts) checkInvariants() {
	p.t.Helper()
	if err := store.CheckInvariants(p.ctx, p.client.pool); err != nil {
		p.t.Fatal(err)
	}
}

// The completer alone: results handed to it are recorded in group commits
// and each caller hears how its own fared (a stale epoch is refused with
// ErrLeaseLost while the rest of its batch commits); Stop records what is
// queued, and a result handed over after Stop is refused, not recorded.
func TestCompleterRecordsBatchesAndFlushesOnStop(t *testing.T) {
	t.Parallel()
	p := setupParts(t, 10, nil)
	p.create(6)
	xs := p.claim(6)
	if len(xs) != 6 {
		t.Fatalf("claimed %d, want 6", len(xs))
	}
	if err := p.done.Start(p.ctx); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[ExecutionID]error{}
	var wg sync.WaitGroup
	hand := func(x *Execution, epoch int64) {
		wg.Add(1)
		stale := *x
		stale.LeaseEpoch = epoch
		p.done.Complete(&stale, []byte(`{"ok":true}`), stale.FlowID == nil, func(_ *Ending, err error) {
			mu.Lock()
			got[x.ID] = err
			mu.Unlock()
			wg.Done()
		})
	}
	for _, x := range xs[:4] {
		hand(x, x.LeaseEpoch)
	}
	hand(xs[4], xs[4].LeaseEpoch+7) // a fenced holder: refused alone
	wg.Wait()
	if err := p.done.Stop(p.ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	hand(xs[5], xs[5].LeaseEpoch) // after Stop: nothing outlives Stop
	wg.Wait()
	for i, x := range xs {
		switch err := got[x.ID]; {
		case i == 4 && !errors.Is(err, ErrLeaseLost):
			t.Errorf("the fenced result was told %v; want ErrLeaseLost", err)
		case i == 5 && !errors.Is(err, context.Canceled):
			t.Errorf("the result handed over after Stop was told %v; want context.Canceled", err)
		case i < 4 && err != nil:
			t.Errorf("result %d was told %v; want it recorded", i, err)
		}
	}
	for i, x := range xs {
		want := StateCompleted
		if i >= 4 {
			want = StateRunning
		}
		p.waitState(x.ID, want)
	}
	p.checkInvariants()
}

// The completer's Stop is bounded by its context: with the context over
// it cuts what waits and returns the context's error.
func TestCompleterStopHonoursItsContext(t *testing.T) {
	t.Parallel()
	p := setupParts(t, 1, nil)
	if err := p.done.Start(p.ctx); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(p.ctx)
	cancel()
	if err := p.done.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
		t.Fatalf("Stop with a context already over: %v; want nil (nothing queued) or context.Canceled", err)
	}
	if err := p.done.Stop(p.ctx); err != nil {
		t.Fatalf("a second Stop: %v; want nil", err)
	}
}

// The executor alone: it runs each execution handed to it under a
// heartbeat, lists what it holds, cancels a handler whose lease is
// revoked at the epoch it holds (and only then), records successes
// through the completer and failures itself, and hands back what still
// runs when its Stop's context ends.
func TestExecutorRunsRevokesAndHandsBack(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var mu sync.Mutex
	causes := map[ExecutionID]error{}
	handler := func(ctx context.Context, j *Job) ([]byte, error) {
		switch j.Kind {
		case "ok":
			return []byte(`1`), nil
		case "boom":
			return nil, Permanent(errors.New("boom"))
		}
		select { // "block": until revoked, handed back or released
		case <-ctx.Done():
			mu.Lock()
			causes[j.ID] = context.Cause(ctx)
			mu.Unlock()
			return nil, ctx.Err()
		case <-release:
			return []byte(`2`), nil
		}
	}
	p := setupParts(t, 10, handler)
	kinds := []string{"ok", "boom", "block", "block"}
	for _, k := range kinds {
		if _, err := p.client.Create(p.ctx, CreateParams{Lane: "parts", Kind: k, MaxAttempts: 3}); err != nil {
			t.Fatal(err)
		}
	}
	xs := p.claim(len(kinds))
	byKind := map[string][]*Execution{}
	for _, x := range xs {
		byKind[x.Kind] = append(byKind[x.Kind], x)
	}
	for _, start := range []func(context.Context) error{p.done.Start, p.exec.Start} {
		if err := start(p.ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range xs {
		p.exec.Run(x)
	}
	p.waitState(byKind["ok"][0].ID, StateCompleted)
	p.waitState(byKind["boom"][0].ID, StateFailed)
	// A run's slot is freed once its handler's goroutine is done, which
	// may be just after its outcome is written.
	for wait := time.Now().Add(10 * time.Second); p.exec.Free() != 8; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(wait) {
			t.Fatalf("Free() = %d 10 s (the budget) after two of four runs ended, with two handlers blocked of 10 slots; want 8", p.exec.Free())
		}
	}
	if held := p.exec.Held(); len(held) != 2 {
		t.Errorf("Held() lists %d leases; want the 2 blocked ones", len(held))
	}

	revoked, kept := byKind["block"][0], byKind["block"][1]
	p.exec.Revoke(revoked.ID, revoked.LeaseEpoch+1) // another epoch: not this holder's
	time.Sleep(50 * time.Millisecond)
	if p.exec.Free() != 8 {
		t.Fatal("a revoke at another epoch cancelled the handler")
	}
	p.exec.Revoke(revoked.ID, revoked.LeaseEpoch)
	deadline := time.Now().Add(10 * time.Second)
	for p.exec.Free() != 9 {
		if time.Now().After(deadline) {
			t.Fatal("the revoked handler never returned")
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if cause := causes[revoked.ID]; !errors.Is(cause, ErrLeaseLost) {
		t.Errorf("the revoked handler's context ended with %v; want ErrLeaseLost", cause)
	}
	mu.Unlock()

	// Stop with a context that ends: the handler still blocked is handed
	// back, pending again with no backoff.
	ctx, cancel := context.WithTimeout(p.ctx, 100*time.Millisecond)
	defer cancel()
	if err := p.exec.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop with a handler blocked: %v; want context.DeadlineExceeded", err)
	}
	p.exec.HandBack(p.ctx)
	if err := p.exec.Stop(p.ctx); err != nil {
		t.Fatalf("Stop after the hand-back: %v; want every handler returned", err)
	}
	mu.Lock()
	if cause := causes[kept.ID]; !errors.Is(cause, ErrWorkerStopped) {
		t.Errorf("the handed-back handler's context ended with %v; want ErrWorkerStopped", cause)
	}
	mu.Unlock()
	p.waitState(kept.ID, StatePending)
	if err := p.done.Stop(p.ctx); err != nil {
		t.Fatal(err)
	}
	p.exec.Abort()
	close(release)
	p.checkInvariants()
}

// The claim loop alone: it fills the executor's free slots, never more,
// claims again as runs end, and after Stop claims nothing.
func TestClaimerFillsFreeSlotsAndStops(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	running, most := 0, 0
	handler := func(ctx context.Context, j *Job) ([]byte, error) {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		mu.Lock()
		running--
		mu.Unlock()
		return nil, nil
	}
	p := setupParts(t, 3, handler)
	p.cfg.PollOnly = true // no LISTEN: the claim loop polls and is woken by ended runs
	ids := p.create(12)
	for _, start := range []func(context.Context) error{p.done.Start, p.exec.Start, p.claims.Start} {
		if err := start(p.ctx); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		p.waitState(id, StateCompleted)
	}
	mu.Lock()
	if most > 3 {
		t.Errorf("%d handlers ran at once; want at most the 3 slots", most)
	}
	mu.Unlock()
	if err := p.claims.Stop(p.ctx); err != nil {
		t.Fatalf("claim loop Stop: %v", err)
	}
	// A claim cut short by Stop may still run on the server: its
	// pipeline was sent whole, and the server finds its client gone only
	// when it answers. Its last statement would see a row created now.
	// So wait until no statement of the database but this wait's runs.
	for wait := time.Now().Add(time.Minute); ; time.Sleep(10 * time.Millisecond) {
		var busy int
		if err := p.client.pool.QueryRow(p.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state NOT IN ('idle')`).Scan(&busy); err != nil {
			t.Fatal(err)
		}
		if busy == 0 {
			break
		}
		if time.Now().After(wait) {
			t.Fatalf("%d statements still running a minute (the budget) after the claim loop stopped", busy)
		}
	}
	late := p.create(1)[0]
	time.Sleep(200 * time.Millisecond) // four poll intervals
	x, err := p.client.Get(p.ctx, late)
	if err != nil {
		t.Fatal(err)
	}
	if x.State != StatePending {
		t.Errorf("an execution created after the claim loop stopped is %s; want pending (unclaimed)", x.State)
	}
	if err := p.exec.Stop(p.ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.done.Stop(p.ctx); err != nil {
		t.Fatal(err)
	}
	p.checkInvariants()
}
