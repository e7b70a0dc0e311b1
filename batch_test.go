package ffd_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// doubling is a batch handler that doubles each job's number, failing
// for good the numbers whose remainder by 7 is 3, and records the size
// of each batch.
func doubling(sizes *[]int, mu *sync.Mutex) ffd.BatchHandlerFunc {
	return func(ctx context.Context, jobs []*ffd.Job) ([]ffd.BatchResult, error) {
		mu.Lock()
		*sizes = append(*sizes, len(jobs))
		mu.Unlock()
		out := make([]ffd.BatchResult, len(jobs))
		for i, j := range jobs {
			n, err := strconv.Atoi(string(j.Payload))
			switch {
			case err != nil:
				out[i].Err = ffd.Permanent(err)
			case n%7 == 3:
				out[i].Err = ffd.Permanent(fmt.Errorf("%d is refused", n))
			default:
				out[i].Result = []byte(strconv.Itoa(2 * n))
			}
		}
		return out, nil
	}
}

// A batch kind runs its executions in batches of at most its size, a
// batch short of it once its wait is over; each execution ends with its
// own outcome: its own result, or its own failure.
func TestBatchHandler(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 35
	var ps []ffd.CreateParams
	for i := range n {
		ps = append(ps, ffd.CreateParams{Lane: "batch", Kind: "double", Payload: []byte(strconv.Itoa(i))})
	}
	xs, err := f.client.CreateMany(f.Ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sizes []int
	k := ffd.NewKinds()
	ffd.HandleBatch(k, "double", 10, 200*time.Millisecond, doubling(&sizes, &mu))
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"batch"}, Kinds: k, Concurrency: 20})
	f.WaitFor("35 executions to end", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state IN ('completed', 'failed')`) == n
	})
	for i, x := range xs {
		got, err := f.client.Get(f.Ctx, x.ID)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 3 {
			if got.State != ffd.StateFailed || !strings.Contains(got.LastError, "is refused") {
				t.Errorf("execution %d: %s %q; want failed, refused", i, got.State, got.LastError)
			}
		} else if got.State != ffd.StateCompleted || string(got.Result) != strconv.Itoa(2*i) {
			t.Errorf("execution %d: %s with %q; want completed with %d", i, got.State, got.Result, 2*i)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	total := 0
	for _, s := range sizes {
		total += s
	}
	if total != n || slices.Max(sizes) != 10 || len(sizes) < 4 {
		t.Fatalf("batches of %v: want at most 10 each, a full one, %d executions in all, each once", sizes, n)
	}
}

// A job whose lease is taken away while its batch runs has its result
// dropped; the others of the batch complete.
func TestBatchHandlerLeaseLost(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ps []ffd.CreateParams
	for i := range 5 {
		ps = append(ps, ffd.CreateParams{Lane: "batch-lost", Kind: "slow", Payload: []byte(strconv.Itoa(i))})
	}
	xs, err := f.client.CreateMany(f.Ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	running := make(chan struct{})
	release := make(chan struct{})
	k := ffd.NewKinds()
	ffd.HandleBatch(k, "slow", 5, time.Minute, func(ctx context.Context, jobs []*ffd.Job) ([]ffd.BatchResult, error) {
		close(running)
		<-release
		out := make([]ffd.BatchResult, len(jobs))
		for i := range out {
			out[i].Result = []byte(`"done"`)
		}
		return out, nil
	})
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"batch-lost"}, Kinds: k, Concurrency: 5})
	select {
	case <-running:
	case <-time.After(2 * time.Minute):
		t.Fatal("the batch of 5 did not start within 2 minutes")
	}
	if _, err := f.client.Cancel(f.Ctx, xs[2].ID, "test", "test"); err != nil {
		t.Fatal(err)
	}
	close(release)
	f.WaitFor("4 completions", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == 4
	})
	if x, _ := f.client.Get(f.Ctx, xs[2].ID); x.State != ffd.StateCancelled {
		t.Fatalf("the execution cancelled mid-batch is %s, want cancelled", x.State)
	}
}

// Bad batch settings are refused by NewWorker with typed errors, and no
// worker runs to claim anything.
func TestBatchHandlerRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fn := func(context.Context, []*ffd.Job) ([]ffd.BatchResult, error) { return nil, nil }
	for _, c := range []struct {
		name        string
		size        int
		wait        time.Duration
		fn          ffd.BatchHandlerFunc
		concurrency int
	}{
		{"max 0", 0, time.Second, fn, 10},
		{"max above the bound", ffd.MaxBatchSize + 1, time.Second, fn, 10},
		{"a negative wait", 5, -time.Second, fn, 10},
		{"a wait above the bound", 5, ffd.MaxBatchWait + time.Second, fn, 10},
		{"no handler", 5, time.Second, nil, 10},
		{"max above the worker's concurrency", 50, time.Second, fn, 10},
	} {
		k := ffd.NewKinds()
		ffd.HandleBatch(k, "b", c.size, c.wait, c.fn)
		var ve *ffd.ValidationError
		if _, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: []string{"b"}, Kinds: k, Concurrency: c.concurrency}); !errors.As(err, &ve) {
			t.Errorf("%s: %v; want a ValidationError", c.name, err)
		}
	}
}

// Environment of the batch worker process TestBatchHandlerSIGKILL starts.
const (
	envBatchWorker = "FFD_TEST_BATCH_WORKER"
	envBatchURL    = "FFD_TEST_BATCH_DATABASE_URL"
)

// batchWorkerMain is the process TestBatchHandlerSIGKILL kills: a worker
// whose batch handler says on stdout how many it took, then never ends.
func batchWorkerMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv(envBatchURL))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	client, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	k := ffd.NewKinds()
	ffd.HandleBatch(k, "double", 100, time.Minute, func(ctx context.Context, jobs []*ffd.Job) ([]ffd.BatchResult, error) {
		fmt.Printf("batch %d\n", len(jobs))
		<-ctx.Done() // killed before it ends
		return nil, ctx.Err()
	})
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"batch-kill"}, Kinds: k, Concurrency: 100})
	if err == nil {
		err = w.Start(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Ends with its parent: stdin is the parent's pipe, closed when the
	// parent exits, however it exits.
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// A worker process is SIGKILLed while it runs a batch of 100: once their
// leases lapse the daemon puts them back, another worker runs them, and
// every execution ends exactly once, completed with its own result.
func TestBatchHandlerSIGKILL(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ps []ffd.CreateParams
	for i := range 100 {
		ps = append(ps, ffd.CreateParams{Lane: "batch-kill", Kind: "double", Payload: []byte(strconv.Itoa(7*i + 1)),
			LeaseTTL: time.Second, Retry: ffd.RetryPolicy{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond}})
	}
	if _, err := f.client.CreateMany(f.Ctx, ps); err != nil {
		t.Fatal(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), envBatchWorker+"=1", envBatchURL+"="+f.DB.URL)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if _, err := child.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || lines.Text() != "batch 100" {
		t.Fatalf("the worker process said %q (%v); want \"batch 100\"", lines.Text(), lines.Err())
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if got := f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'running'`); got != 100 {
		t.Fatalf("%d executions running when the worker was killed, want its batch of 100", got)
	}
	f.startDaemon()
	var mu sync.Mutex
	var sizes []int
	k := ffd.NewKinds()
	ffd.HandleBatch(k, "double", 100, 100*time.Millisecond, doubling(&sizes, &mu))
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"batch-kill"}, Kinds: k, Concurrency: 100})
	f.WaitFor("100 executions completed after the kill", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == 100
	})
	if got := f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed' AND convert_from(result, 'UTF8')::int = 2 * convert_from(payload, 'UTF8')::int`); got != 100 {
		t.Fatalf("%d executions completed with their own result, want 100", got)
	}
	if got := f.Count(`SELECT count(*) FROM (SELECT execution_id FROM ff_completion_event GROUP BY execution_id HAVING count(*) = 1) x`); got != 100 {
		t.Fatalf("%d executions with exactly one completion event, want 100", got)
	}
	if got := f.Count(`SELECT count(*) FROM ff_completion_event`); got != 100 {
		t.Fatalf("%d completion events, want one per execution", got)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution WHERE attempt < 2`); got != 0 {
		t.Fatalf("%d executions ran once; want each killed with its batch and run again", got)
	}
	var js []byte
	mu.Lock()
	js, _ = json.Marshal(sizes)
	mu.Unlock()
	t.Logf("after the kill, batches of %s", js)
}
