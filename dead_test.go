package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

// A thousand executions that fail for good become dead letters; two bulk
// reruns racing on the same selection rerun each exactly once, and every
// rerun completes. A dry run first selects them all and writes nothing.
func TestDeadLettersRerunInBulk(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 1000
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: "dead", Kind: "charge", JSON: map[string]int{"i": i}, MaxAttempts: 2,
			Retry: ffd.RetryPolicy{Base: 10 * time.Millisecond, Max: 10 * time.Millisecond}}
	}
	if _, err := f.client.CreateMany(f.Ctx, ps); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[int]int{}      // payload -> handler runs
	reruns := map[int]string{} // payload -> the dead letter its successful run reran
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"dead"}, Concurrency: 32,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			var in struct{ I int }
			if err := job.UnmarshalPayload(&in); err != nil {
				return nil, err
			}
			mu.Lock()
			defer mu.Unlock()
			runs[in.I]++
			if job.RerunOf == nil {
				return nil, fmt.Errorf("card %d declined", in.I)
			}
			reruns[in.I] = job.RerunOf.String()
			return nil, nil
		}})
	f.WaitFor("1,000 dead letters", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'failed'`) == n
	})
	page, err := f.client.ListDeadLetters(f.Ctx, ffd.ListDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: "dead", ErrorContains: "DECLINED"}, Limit: 10})
	if err != nil || len(page.Executions) != 10 || page.Next == nil {
		t.Fatalf("first page of dead letters: %v, %v; want 10 and a cursor", page, err)
	}
	if x := page.Executions[0]; x.Attempt != 2 || x.LastError == "" || x.State != ffd.StateFailed {
		t.Fatalf("dead letter %+v: want failed after 2 attempts, with its last error", x)
	}
	sel := ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Kind: "charge", ErrorContains: "declined"}}
	dry := sel
	dry.DryRun = true
	out, err := f.client.RerunDeadLetters(f.Ctx, dry)
	if err != nil || len(out.Selected) != n || len(out.Reruns) != 0 || out.More || !out.DryRun {
		t.Fatalf("dry run: %d selected, %d reruns, more %v, err %v; want %d selected and nothing rerun", len(out.Selected), len(out.Reruns), out.More, err, n)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution`); got != n {
		t.Fatalf("%d executions after a dry run, want %d", got, n)
	}
	var wg sync.WaitGroup
	made := make([]*ffd.DeadRerun, 2)
	errs := make([]error, 2)
	for i := range made {
		wg.Add(1)
		go func() {
			defer wg.Done()
			made[i], errs[i] = f.client.RerunDeadLetters(f.Ctx, sel)
		}()
	}
	wg.Wait()
	total := 0
	for i := range made {
		if errs[i] != nil {
			t.Fatalf("bulk rerun %d: %v", i, errs[i])
		}
		total += len(made[i].Reruns)
	}
	if total != n {
		t.Fatalf("two racing bulk reruns made %d reruns, want %d (%d and %d)", total, n, len(made[0].Reruns), len(made[1].Reruns))
	}
	f.WaitFor("1,000 reruns completed", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed' AND rerun_of IS NOT NULL`) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for i := range n {
		if runs[i] != 3 || reruns[i] == "" {
			t.Fatalf("payload %d ran %d times (rerun of %q); want 2 failed attempts and 1 rerun", i, runs[i], reruns[i])
		}
	}
	if got := f.Count(`SELECT count(DISTINCT rerun_of) FROM ff_execution WHERE rerun_of IS NOT NULL`); got != n {
		t.Fatalf("%d dead letters rerun, want each of %d once", got, n)
	}
	if page, err := f.client.ListDeadLetters(f.Ctx, ffd.ListDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: "dead"}}); err != nil || len(page.Executions) != 0 {
		t.Fatalf("dead letters after their reruns: %v, %v; want none", page, err)
	}
}

// Bad selections are refused with typed errors, and nothing is written.
func TestDeadLettersRefuseBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	failed, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "dl", MaxAttempts: 1})
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "dl", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := f.client.Fail(f.Ctx, failed.Execution.ID, xs[0].LeaseEpoch, ffd.FailParams{Error: "boom"}); err != nil {
		t.Fatal(err)
	}
	running, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "dl"})
	if _, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "dl", Worker: "w/1", Max: 1}); err != nil {
		t.Fatal(err)
	}
	pending, _ := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "dl-pending"})
	var ve *ffd.ValidationError
	var ce *ffd.ConflictError
	for _, c := range []struct {
		name string
		p    ffd.RerunDeadParams
		want any
	}{
		{"no filter", ffd.RerunDeadParams{}, &ve},
		{"ids and a lane", ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{IDs: []ffd.ExecutionID{failed.Execution.ID}, Lane: "dl"}}, &ve},
		{"limit above the maximum", ffd.RerunDeadParams{All: true, Limit: ffd.MaxDeadRerun + 1}, &ve},
		{"a bad lane", ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: "no spaces"}}, &ve},
		{"a running execution", ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{IDs: []ffd.ExecutionID{failed.Execution.ID, running.Execution.ID}}}, &ce},
		{"a pending execution", ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{IDs: []ffd.ExecutionID{pending.Execution.ID}}}, &ce},
	} {
		_, err := f.client.RerunDeadLetters(f.Ctx, c.p)
		var ok bool
		switch w := c.want.(type) {
		case **ffd.ValidationError:
			ok = errors.As(err, w)
		case **ffd.ConflictError:
			ok = errors.As(err, w)
		}
		if !ok {
			t.Errorf("%s: %v; want a %T", c.name, err, c.want)
		}
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution`); got != 3 {
		t.Fatalf("%d executions after refused reruns, want the 3 created", got)
	}
	if _, err := f.client.ListDeadLetters(f.Ctx, ffd.ListDeadParams{Limit: 1001}); !errors.As(err, &ve) {
		t.Fatalf("list with limit 1001: %v; want a ValidationError", err)
	}
	out, err := f.client.RerunDeadLetters(f.Ctx, ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{IDs: []ffd.ExecutionID{failed.Execution.ID, failed.Execution.ID}}})
	if err != nil || len(out.Reruns) != 1 || *out.Reruns[0].RerunOf != failed.Execution.ID.UUID {
		t.Fatalf("rerun by id, given twice: %+v, %v; want one rerun of %s", out, err, failed.Execution.ID)
	}
	if _, err := f.client.RerunDeadLetters(f.Ctx, ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{IDs: []ffd.ExecutionID{failed.Execution.ID}}}); !errors.As(err, &ce) {
		t.Fatalf("second rerun by id: %v; want a ConflictError (rerun already)", err)
	}
}
