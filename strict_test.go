package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// 1,000 executions over 10 keys of strict order, created by batches (by
// COPY and by one statement) and one by one, run under two workers whose
// handler fails a third of its attempts. Per key, the executions start
// in creation order, each one's attempts back to back (a retry holds its
// place), and never two at once: not in the handlers, and not in the
// database, sampled every 10 ms.
func TestStrictOrderPerKey(t *testing.T) {
	t.Parallel()
	f := setupFor(t, 5*time.Minute)
	const n, keys = 1000, 10
	strict := ffd.OrderStrict
	for k := range keys {
		if _, err := f.client.SetKey(f.Ctx, "strict", fmt.Sprint("k", k), ffd.KeyParams{Order: &strict}, ffd.NewLane()); err != nil {
			t.Fatal(err)
		}
	}
	params := func(i int) ffd.CreateParams {
		return ffd.CreateParams{Lane: "strict", ConcurrencyKey: fmt.Sprint("k", i%keys), JSON: map[string]int{"i": i},
			MaxAttempts: 10, Retry: ffd.RetryPolicy{Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}}
	}
	batch := func(from, to int) {
		var ps []ffd.CreateParams
		for i := from; i < to; i++ {
			ps = append(ps, params(i))
		}
		if _, err := f.client.CreateMany(f.Ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	batch(0, 150)   // COPY
	batch(150, 300) // COPY
	for from := 300; from < 600; from += 30 {
		batch(from, from+30) // one statement
	}
	for i := 600; i < n; i++ {
		if _, err := f.client.Create(f.Ctx, params(i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	starts := make([][]int, keys) // per key, the payload of each attempt, in start order
	running := make([]atomic.Int32, keys)
	var overlaps atomic.Int32
	handler := func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		var in struct{ I int }
		if err := job.UnmarshalPayload(&in); err != nil {
			return nil, err
		}
		k := in.I % keys
		if running[k].Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running[k].Add(-1)
		mu.Lock()
		starts[k] = append(starts[k], in.I)
		mu.Unlock()
		if (in.I*7+job.Attempt*13)%3 == 0 && job.Attempt < job.MaxAttempts {
			return nil, fmt.Errorf("flaky %d, attempt %d", in.I, job.Attempt)
		}
		return nil, nil
	}
	for range 2 {
		f.startWorker(ffd.WorkerConfig{Lanes: []string{"strict"}, Concurrency: 8, PollInterval: 20 * time.Millisecond, Handler: handler})
	}
	var sampled, seenTwo atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		for f.Ctx.Err() == nil {
			if f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed' AND lane = 'strict'`) == n {
				return
			}
			if f.Count(`SELECT count(*) FROM (SELECT 1 FROM ff_execution WHERE state = 'running' AND lane = 'strict'
				GROUP BY concurrency_key HAVING count(*) > 1) x`) > 0 {
				seenTwo.Add(1)
			}
			sampled.Add(1)
			time.Sleep(10 * time.Millisecond)
		}
	}()
	f.WaitFor("1,000 strictly ordered executions to complete", func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	})
	if seenTwo.Load() > 0 || overlaps.Load() > 0 {
		t.Fatalf("two executions of one key ran at once: %d of %d samples, %d handler overlaps", seenTwo.Load(), sampled.Load(), overlaps.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	retries := 0
	for k := range keys {
		var order []int
		for i, x := range starts[k] {
			if i > 0 && starts[k][i-1] == x {
				retries++
				continue // a retry, back to back with its earlier attempt
			}
			order = append(order, x)
		}
		var want []int
		for i := k; i < n; i += keys {
			want = append(want, i)
		}
		if !slices.Equal(order, want) {
			t.Fatalf("key k%d started %v; want creation order %v", k, order, want)
		}
	}
	if retries == 0 {
		t.Fatal("no attempt was retried: the test proves nothing of retries holding their place")
	}
	t.Logf("%d retries held their place; %d samples", retries, sampled.Load())
}

// A retry waiting out its backoff holds its key: nothing behind it
// starts until it runs or is cancelled, and cancelling it lets the next
// go. Executions created before a key was made strict keep their claim
// order. Limits above 1 on a strict key are refused and write nothing.
func TestStrictOrderHoldsAndCancels(t *testing.T) {
	t.Parallel()
	f := setup(t)
	create := func(p ffd.CreateParams) ffd.ExecutionID {
		t.Helper()
		p.Lane, p.ConcurrencyKey = "so", "acct"
		res, err := f.client.Create(f.Ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res.Execution.ID
	}
	a := create(ffd.CreateParams{Retry: ffd.RetryPolicy{Base: time.Hour, Max: time.Hour}})
	b := create(ffd.CreateParams{})
	strict := ffd.OrderStrict
	k, err := f.client.SetKey(f.Ctx, "so", "acct", ffd.KeyParams{Order: &strict})
	if err != nil || k.Order != ffd.OrderStrict || k.MaxRunning != 1 {
		t.Fatalf("make the key strict: %+v, %v; want strict with a running limit of 1", k, err)
	}
	c := create(ffd.CreateParams{Priority: 100}) // priority does not jump a strict queue
	claim := func() []ffd.ExecutionID {
		t.Helper()
		xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "so", Worker: "w/1", Max: 5})
		if err != nil {
			t.Fatal(err)
		}
		var ids []ffd.ExecutionID
		for _, x := range xs {
			ids = append(ids, x.ID)
		}
		return ids
	}
	got := claim()
	if len(got) != 1 || got[0] != a {
		t.Fatalf("first claim took %v; want only %s, the first created", got, a)
	}
	x, _ := f.client.Get(f.Ctx, a)
	if _, err := f.client.Fail(f.Ctx, a, x.LeaseEpoch, ffd.FailParams{Error: "later", Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if got := claim(); len(got) != 0 {
		t.Fatalf("claim while the head waits out its backoff took %v; want nothing", got)
	}
	if _, err := f.client.Cancel(f.Ctx, a, "test", "test"); err != nil {
		t.Fatal(err)
	}
	if got := claim(); len(got) != 1 || got[0] != b {
		t.Fatalf("claim after cancelling the head took %v; want %s", got, b)
	}
	x, _ = f.client.Get(f.Ctx, b)
	if _, err := f.client.Complete(f.Ctx, b, x.LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	if got := claim(); len(got) != 1 || got[0] != c {
		t.Fatalf("claim after the second ended took %v; want %s", got, c)
	}

	var ve *ffd.ValidationError
	two, three := 2, 3
	if _, err := f.client.SetKey(f.Ctx, "so", "acct", ffd.KeyParams{MaxRunning: &two}); !errors.As(err, &ve) {
		t.Errorf("a limit of 2 on a strict key: %v; want a ValidationError", err)
	}
	if _, err := f.client.SetKey(f.Ctx, "so", "other", ffd.KeyParams{Order: &strict, MaxRunning: &three}); !errors.As(err, &ve) {
		t.Errorf("strict order with a limit of 3: %v; want a ValidationError", err)
	}
	before := f.Count(`SELECT count(*) FROM ff_execution`)
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "so", ConcurrencyKey: "acct", ConcurrencyLimit: 2}); !errors.As(err, &ve) {
		t.Errorf("a create giving a strict key a limit of 2: %v; want a ValidationError", err)
	}
	if _, err := f.client.CreateMany(f.Ctx, []ffd.CreateParams{{Lane: "so", ConcurrencyKey: "acct", ConcurrencyLimit: 2}}); !errors.As(err, &ve) {
		t.Errorf("a batch giving a strict key a limit of 2: %v; want a ValidationError", err)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution`); got != before {
		t.Fatalf("%d executions after refused creates, want %d", got, before)
	}
	if k, err := f.client.SetKey(f.Ctx, "so", "acct", ffd.KeyParams{}); err != nil || k.Order != ffd.OrderStrict || k.MaxRunning != 1 {
		t.Fatalf("the key after refusals: %+v, %v; want it strict, limit 1", k, err)
	}
	fair := ffd.OrderFair
	if k, err := f.client.SetKey(f.Ctx, "so", "acct", ffd.KeyParams{Order: &fair, MaxRunning: &three}); err != nil || k.Order != ffd.OrderFair || k.MaxRunning != 3 {
		t.Fatalf("back to fair with a limit of 3: %+v, %v", k, err)
	}
}
