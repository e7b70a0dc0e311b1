package ffd

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Many handler calls racing into one batcher: no batch holds more than
// its size, each call gets its own job's result, and a call whose
// context ends before its batch runs returns its cause while the batch
// goes on without it.
func TestBatcherUnderRacingCalls(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var sizes []int
	b := &batcher{max: 7, wait: 20 * time.Millisecond, fn: func(ctx context.Context, jobs []*Job) ([]BatchResult, error) {
		mu.Lock()
		sizes = append(sizes, len(jobs))
		mu.Unlock()
		out := make([]BatchResult, len(jobs))
		for i, j := range jobs {
			out[i].Result = append([]byte("r"), j.Payload...)
		}
		return out, nil
	}}
	const n = 1000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := strconv.Itoa(i)
			got, err := b.handle(context.Background(), &Job{Execution: &Execution{Payload: []byte(p)}})
			if err != nil || string(got) != "r"+p {
				errs <- errors.Join(err, errors.New("call "+p+" got "+string(got)))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	total := 0
	for _, s := range sizes {
		if s > 7 {
			t.Fatalf("a batch of %d, size 7", s)
		}
		total += s
	}
	if total != n {
		t.Fatalf("batches held %d jobs, want %d", total, n)
	}

	lost := errors.New("lease lost")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(lost)
	if _, err := b.handle(ctx, &Job{Execution: &Execution{Payload: []byte("x")}}); !errors.Is(err, lost) {
		t.Fatalf("a call whose context ended: %v; want its cause", err)
	}
}

// A batch handler that panics, errs, or miscounts its results fails
// every job of its batch.
func TestBatcherFailures(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		fn   BatchHandlerFunc
		want string
	}{
		{"panic", func(context.Context, []*Job) ([]BatchResult, error) { panic("boom") }, "batch handler panicked: boom"},
		{"error", func(context.Context, []*Job) ([]BatchResult, error) { return nil, errors.New("down") }, "down"},
		{"miscount", func(context.Context, []*Job) ([]BatchResult, error) { return make([]BatchResult, 1), nil }, "batch handler returned 1 results for 2 executions"},
	} {
		b := &batcher{max: 2, wait: time.Minute, fn: c.fn}
		var wg sync.WaitGroup
		for range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := b.handle(context.Background(), &Job{Execution: &Execution{}}); err == nil || err.Error() != c.want {
					t.Errorf("%s: %v; want %q", c.name, err, c.want)
				}
			}()
		}
		wg.Wait()
	}
}

// A completion's lock wait is the configured one, or a quarter of the
// shortest lease it completes when that is shorter.
func TestLockWithin(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ limit, ttl, want time.Duration }{
		{2 * time.Second, 0, 2 * time.Second},
		{2 * time.Second, 30 * time.Second, 2 * time.Second},
		{2 * time.Second, 2 * time.Second, 500 * time.Millisecond},
		{2 * time.Second, 20 * time.Millisecond, 10 * time.Millisecond},
		{50 * time.Millisecond, time.Second, 50 * time.Millisecond},
	} {
		if got := lockWithin(c.limit, c.ttl); got != c.want {
			t.Errorf("lockWithin(%s, %s) = %s, want %s", c.limit, c.ttl, got, c.want)
		}
	}
}
