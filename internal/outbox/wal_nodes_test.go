package outbox_test

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/outbox"
)

// A stream over several nodes (Citus's worker nodes; here two databases
// of one server) delivers every node's transactions, calls the handler
// for one node at a time, says it started once every node streams, ends
// every node's stream when one node's fails, and resumes each from its
// own slot: nothing acknowledged again, nothing lost.
func TestWALOverSeveralNodes(t *testing.T) {
	t.Parallel()
	a, b := setup(t), setup(t)
	slotA, slotB := a.slot(), b.slot()
	var (
		mu        sync.Mutex
		got       []int64
		inFlight  atomic.Int32
		overlaps  atomic.Int32
		starts    atomic.Int32
		startedCh = make(chan struct{}, 4)
	)
	run := func(ctx context.Context) error {
		return outbox.StreamNodes(ctx, ffdtype.WALConfig{StatusInterval: 100 * time.Millisecond,
			OnStart: func() { starts.Add(1); startedCh <- struct{}{} },
			Handler: func(_ context.Context, ev []ffdtype.OutboxEvent) error {
				if inFlight.Add(1) > 1 {
					overlaps.Add(1)
				}
				time.Sleep(time.Millisecond) // widen the window a concurrent call would need
				mu.Lock()
				got = append(got, ids(ev)...)
				mu.Unlock()
				inFlight.Add(-1)
				return nil
			}}, []string{a.DB.URL, b.DB.URL}, []string{slotA, slotB})
	}
	ctx, stop := context.WithCancel(a.Ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case <-startedCh:
	case err := <-done:
		t.Fatalf("the stream ended before starting: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the stream never started")
	}
	a.waitSlotActive(slotA)
	pidB := b.waitSlotActive(slotB)

	// Events on both nodes at once; the two databases' ids overlap, so
	// what came is compared as a multiset.
	var want []int64
	var wmu sync.Mutex
	write := func(f *fixture, n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id, err := insertEvent(f.Ctx, f.DB.Pool)
				if err != nil {
					t.Error(err)
					return
				}
				wmu.Lock()
				want = append(want, id)
				wmu.Unlock()
			}()
		}
		wg.Wait()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); write(a, 40) }()
	go func() { defer wg.Done(); write(b, 40) }()
	wg.Wait()
	waitFor := func(n int) []int64 {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for {
			mu.Lock()
			have := slices.Clone(got)
			mu.Unlock()
			if len(have) >= n || time.Now().After(deadline) {
				slices.Sort(have)
				return have
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	slices.Sort(want)
	if have := waitFor(len(want)); !slices.Equal(have, want) {
		t.Fatalf("delivered %v, want %v", have, want)
	}
	if n := overlaps.Load(); n > 0 {
		t.Errorf("the handler ran for two nodes at once %d times", n)
	}
	if n := starts.Load(); n != 1 {
		t.Errorf("OnStart called %d times, want once (when both nodes stream)", n)
	}

	// One node's walsender ends: the whole stream ends with an error worth
	// retrying, and the other node's slot is let go.
	if _, err := b.DB.Pool.Exec(b.Ctx, `SELECT pg_terminate_backend($1)`, pidB); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !outbox.Transient(err) {
			t.Fatalf("a node's stream was cut: StreamNodes returned %v, want a transient error", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the stream went on after one node's connection was cut")
	}
	stop()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var active bool
		if err := a.DB.Pool.QueryRow(a.Ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slotA).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the other node's slot stayed active after the stream ended")
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Written while nobody streamed: a new stream delivers exactly these
	// (each node resumes from its own confirmed position).
	mu.Lock()
	got = nil
	mu.Unlock()
	want = nil
	write(a, 5)
	write(b, 7)
	ctx, stop = context.WithCancel(a.Ctx)
	defer stop()
	go func() { done <- run(ctx) }()
	slices.Sort(want)
	if have := waitFor(len(want)); !slices.Equal(have, want) {
		t.Fatalf("after the restart, delivered %v, want %v", have, want)
	}
	time.Sleep(300 * time.Millisecond) // anything acknowledged before would come by now
	mu.Lock()
	if len(got) != len(want) {
		t.Errorf("after the restart, delivered %d events, want %d: %v", len(got), len(want), got)
	}
	mu.Unlock()
	stop()
	if err := <-done; err != nil {
		t.Fatalf("a cancelled stream returned %v, want nil", err)
	}
}
