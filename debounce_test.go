package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
)

// 100 creators each create 50 times on one trailing debounce key while a
// worker runs what comes due. Every window has one execution: the folds
// each create reports for an execution run 1, 2, ... with no gap and no
// repeat, they add up to every create, and the payload an execution ran
// with is that of the last create folded into it.
func TestDebounceUnderConcurrentCreators(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const creators, each = 100, 50
	var mu sync.Mutex
	ran := map[ffd.ExecutionID]string{}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"db"}, Concurrency: 4,
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			mu.Lock()
			defer mu.Unlock()
			if _, again := ran[job.ID]; again {
				return nil, fmt.Errorf("execution %s ran twice", job.ID)
			}
			ran[job.ID] = string(job.Payload)
			return nil, nil
		}})
	type made struct {
		id      ffd.ExecutionID
		folds   int64
		existed bool
		payload string
	}
	results := make([][]made, creators)
	var wg sync.WaitGroup
	for g := range creators {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				payload := fmt.Sprintf(`{"g": %d, "i": %d}`, g, i)
				res, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "db", Payload: []byte(payload),
					Debounce: &ffd.Debounce{Key: "sync:42", Window: 20 * time.Millisecond, MaxWait: 100 * time.Millisecond}})
				if err != nil {
					t.Errorf("creator %d, create %d: %v", g, i, err)
					return
				}
				results[g] = append(results[g], made{res.Execution.ID, res.Folds, res.Existed, payload})
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	last := map[ffd.ExecutionID]made{}
	folds := map[ffd.ExecutionID][]int64{}
	for _, rs := range results {
		for _, m := range rs {
			folds[m.id] = append(folds[m.id], m.folds)
			if m.existed != (m.folds > 1) {
				t.Fatalf("create folded %d into %s reports existed %v", m.folds, m.id, m.existed)
			}
			if m.folds > last[m.id].folds {
				last[m.id] = m
			}
		}
	}
	total := 0
	for id, fs := range folds {
		slices.Sort(fs)
		for i, n := range fs {
			if n != int64(i+1) {
				t.Fatalf("execution %s: folds %v; want 1..%d, each once", id, fs, len(fs))
			}
		}
		total += len(fs)
	}
	if total != creators*each {
		t.Fatalf("%d creates accounted for, want %d", total, creators*each)
	}
	if got := f.Count(`SELECT count(*) FROM ff_execution`); got != len(folds) {
		t.Fatalf("%d executions, want one per window: %d", got, len(folds))
	}
	f.WaitFor("every window's execution to run", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == len(folds)
	})
	mu.Lock()
	defer mu.Unlock()
	for id, m := range last {
		if ran[id] != m.payload {
			t.Fatalf("execution %s ran with %s; want the payload of its last fold (%d): %s", id, ran[id], m.folds, m.payload)
		}
	}
	t.Logf("%d creates made %d executions", total, len(folds))
}

// A trailing window waits for quiet and keeps the last payload, never
// later than its max wait after the first create; once its execution
// runs, the next create opens a new window. A leading window runs the
// first create at once and folds the rest into it, its payload kept,
// until the window ends.
func TestDebounceWindows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	create := func(key, payload string, d ffd.Debounce) *ffd.CreateResult {
		t.Helper()
		d.Key = key
		res, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "win", Payload: []byte(payload), Debounce: &d})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	trailing := ffd.Debounce{Window: time.Hour, MaxWait: 2 * time.Hour}
	a := create("t", `1`, trailing)
	b := create("t", `2`, trailing)
	if b.Execution.ID != a.Execution.ID || !b.Existed || b.Folds != 2 || string(b.Execution.Payload) != `2` || !b.Execution.RunAt.After(a.Execution.RunAt) {
		t.Fatalf("second trailing create: %+v; want the first's execution, its payload replaced and its run pushed back", b)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE execution_id = $1 AND run_at <= created_at + interval '2 hours'`, a.Execution.ID.UUID); n != 1 {
		t.Fatal("a trailing execution runs later than its max wait after the first create")
	}
	// Started, the window is over: the next create opens another.
	f.Exec(`UPDATE ff_execution SET run_at = now() WHERE execution_id = $1`, a.Execution.ID.UUID)
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "win", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 || string(xs[0].Payload) != `2` {
		t.Fatalf("claim the window's execution: %v %v; want it with the last payload", xs, err)
	}
	if c := create("t", `3`, trailing); c.Execution.ID == a.Execution.ID || c.Existed || c.Folds != 1 {
		t.Fatalf("create after the window's execution started: %+v; want a new execution", c)
	}

	leading := ffd.Debounce{Window: 300 * time.Millisecond, Mode: ffd.DebounceLeading}
	first := create("l", `"first"`, leading)
	if !first.Execution.RunAt.Before(time.Now().Add(time.Second)) || first.Folds != 1 {
		t.Fatalf("leading create: %+v; want it due at once", first)
	}
	second := create("l", `"second"`, leading)
	if second.Execution.ID != first.Execution.ID || !second.Existed || second.Folds != 2 || string(second.Execution.Payload) != `"first"` {
		t.Fatalf("second leading create within the window: %+v; want the first, its payload kept", second)
	}
	time.Sleep(400 * time.Millisecond) // past the window, by the database's clock too
	if third := create("l", `"third"`, leading); third.Execution.ID == first.Execution.ID || third.Existed {
		t.Fatalf("leading create after the window: %+v; want a new execution", third)
	}
	// Closed windows are forgotten once a minute old; open ones stay.
	f.Exec(`UPDATE ff_debounce SET first_at = first_at - interval '2 minutes', until = until - interval '2 minutes'`)
	open := create("open", `1`, trailing)
	f.Exec(`UPDATE ff_debounce SET first_at = first_at - interval '2 minutes' WHERE debounce_key = 'open'`)
	if n, err := store.DeleteClosedDebounces(f.Ctx, f.Pool); err != nil || n != 1 {
		t.Fatalf("forget closed windows: %d, %v; want 1 (l, past its end; t's third execution has not started)", n, err)
	}
	if c := create("l", `"fourth"`, leading); c.Folds != 1 {
		t.Fatalf("a create on a forgotten window: %+v; want a new one", c)
	}
	if again := create("open", `2`, trailing); again.Execution.ID != open.Execution.ID {
		t.Fatal("an open window was forgotten")
	}
}

// Bad debounces are refused with typed errors, and nothing is written.
func TestDebounceRefusesBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ok := ffd.Debounce{Key: "k", Window: time.Second}
	with := func(change func(*ffd.CreateParams)) ffd.CreateParams {
		d := ok
		p := ffd.CreateParams{Lane: "bad", Debounce: &d}
		change(&p)
		return p
	}
	for _, c := range []struct {
		name string
		p    ffd.CreateParams
	}{
		{"zero window", with(func(p *ffd.CreateParams) { p.Debounce.Window = 0 })},
		{"negative window", with(func(p *ffd.CreateParams) { p.Debounce.Window = -time.Second })},
		{"no key", with(func(p *ffd.CreateParams) { p.Debounce.Key = "" })},
		{"a control character in the key", with(func(p *ffd.CreateParams) { p.Debounce.Key = "a\x00b" })},
		{"an unknown mode", with(func(p *ffd.CreateParams) { p.Debounce.Mode = "sideways" })},
		{"max wait below the window", with(func(p *ffd.CreateParams) { p.Debounce.MaxWait = time.Millisecond })},
		{"max wait on a leading window", with(func(p *ffd.CreateParams) {
			p.Debounce.Mode, p.Debounce.MaxWait = ffd.DebounceLeading, time.Minute
		})},
		{"with an idempotency key", with(func(p *ffd.CreateParams) { p.IdempotencyKey = "i" })},
		{"with a unique key", with(func(p *ffd.CreateParams) { p.UniqueKey = "u" })},
		{"with a delay", with(func(p *ffd.CreateParams) { p.Delay = time.Second })},
	} {
		var ve *ffd.ValidationError
		if _, err := f.client.Create(f.Ctx, c.p); !errors.As(err, &ve) {
			t.Errorf("%s: %v; want a ValidationError", c.name, err)
		}
	}
	var ve *ffd.ValidationError
	if _, err := f.client.CreateMany(f.Ctx, []ffd.CreateParams{with(func(*ffd.CreateParams) {})}); !errors.As(err, &ve) {
		t.Errorf("debounce in CreateMany: %v; want a ValidationError", err)
	}
	if _, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: with(func(*ffd.CreateParams) {})}}}); !errors.As(err, &ve) {
		t.Errorf("debounce in a flow: %v; want a ValidationError", err)
	}
	if n := f.Count(`SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_debounce) + (SELECT count(*) FROM ff_flow)`); n != 0 {
		t.Fatalf("%d rows written by refused creates, want 0", n)
	}
}
