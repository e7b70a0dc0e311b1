//go:build citus

package citus_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
)

// Dead letters across the shards: listed by lane and error text, a dry
// run writes nothing, two racing bulk reruns rerun each once, and the
// reruns complete.
func TestDeadLettersOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("dead")
	const n = 40
	f.worker(t, lane, func(_ context.Context, j *ffd.Job) ([]byte, error) {
		if j.RerunOf == nil {
			return nil, ffd.Permanent(fmt.Errorf("declined %s", j.ID))
		}
		return []byte(`"ok"`), nil
	})
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: lane, Kind: "charge"}
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	f.waitCount(t, "40 dead letters", n, `SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'failed'`, lane)
	page, err := f.client.ListDeadLetters(f.ctx, ffd.ListDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: lane, ErrorContains: "DECLINED"}, Limit: 1000})
	if err != nil || len(page.Executions) != n {
		t.Fatalf("list dead letters: %v, %v; want %d", page, err, n)
	}
	sel := ffd.RerunDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: lane}}
	dry := sel
	dry.DryRun = true
	if out, err := f.client.RerunDeadLetters(f.ctx, dry); err != nil || len(out.Selected) != n || len(out.Reruns) != 0 {
		t.Fatalf("dry run: %+v, %v", out, err)
	}
	var wg sync.WaitGroup
	var made atomic.Int32
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out, err := f.client.RerunDeadLetters(f.ctx, sel)
			if err != nil {
				t.Errorf("bulk rerun: %v", err)
				return
			}
			made.Add(int32(len(out.Reruns)))
		}()
	}
	wg.Wait()
	if made.Load() != n {
		t.Fatalf("two racing bulk reruns made %d reruns, want %d", made.Load(), n)
	}
	f.waitCount(t, "40 reruns completed", n, `SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed' AND rerun_of IS NOT NULL`, lane)
	if page, err := f.client.ListDeadLetters(f.ctx, ffd.ListDeadParams{DeadLetterFilter: ffd.DeadLetterFilter{Lane: lane}}); err != nil || len(page.Executions) != 0 {
		t.Fatalf("dead letters after the reruns: %v, %v; want none", page, err)
	}
}

// waitCount waits until sql counts want, for at most the test's budget.
func (f *fixture) waitCount(t *testing.T, what string, want int, sql string, args ...any) {
	t.Helper()
	for {
		n, err := f.count(sql, args...)
		if err != nil {
			t.Fatal(err)
		}
		if n == want {
			return
		}
		select {
		case <-f.ctx.Done():
			t.Fatalf("waited the test's budget for %s: %d of %d", what, n, want)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Debounce on Citus: 20 racing creators of 10 creates each on one
// trailing key make one execution, with the last fold's payload; a
// leading key runs its first create and folds the next into it.
func TestDebounceOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("debounce")
	type made struct {
		id      ffd.ExecutionID
		folds   int64
		payload string
	}
	var mu sync.Mutex
	var all []made
	var wg sync.WaitGroup
	for g := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				p := fmt.Sprintf(`{"g":%d,"i":%d}`, g, i)
				res, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane, Payload: []byte(p),
					Debounce: &ffd.Debounce{Key: f.prefix + ":t", Window: time.Hour}})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				mu.Lock()
				all = append(all, made{res.Execution.ID, res.Folds, p})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var folds []int64
	last := all[0]
	for _, m := range all {
		if m.id != all[0].id {
			t.Fatalf("creates made %s and %s; want one execution for the window", m.id, all[0].id)
		}
		folds = append(folds, m.folds)
		if m.folds > last.folds {
			last = m
		}
	}
	slices.Sort(folds)
	for i, n := range folds {
		if n != int64(i+1) {
			t.Fatalf("folds %v; want 1..200, each once", folds)
		}
	}
	x, err := f.client.Get(f.ctx, last.id)
	if err != nil || string(x.Payload) != last.payload {
		t.Fatalf("the window's execution: %v, %v; want the last fold's payload %s", x, err, last.payload)
	}
	lead := ffd.Debounce{Key: f.prefix + ":l", Window: time.Hour, Mode: ffd.DebounceLeading}
	a, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane, Payload: []byte(`1`), Debounce: &lead})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane, Payload: []byte(`2`), Debounce: &lead})
	if err != nil || b.Execution.ID != a.Execution.ID || string(b.Execution.Payload) != `1` || !b.Existed {
		t.Fatalf("second leading create: %+v, %v; want the first, its payload kept", b, err)
	}
	// The daemon's retention pass forgets closed windows across the
	// shards: none of these is closed.
	if _, err := store.DeleteClosedDebounces(f.ctx, f.pool); err != nil {
		t.Fatalf("forget closed debounce windows: %v", err)
	}
	if n, err := f.count(`SELECT count(*) FROM ff_debounce WHERE debounce_key LIKE $1`, f.prefix+":%"); err != nil || n != 2 {
		t.Fatalf("%d debounce windows left, %v; want both, open", n, err)
	}
}

// Strict order on Citus, through the routed claim: executions created
// before the key was made strict, by COPY and one by one, start in
// creation order under two workers that fail a third of their attempts,
// each one's attempts back to back, never two at once.
func TestStrictOrderOnCitus(t *testing.T) {
	t.Parallel()
	f := setupFor(t, 4*time.Minute)
	lane := f.lane("strict")
	params := func(i int) ffd.CreateParams {
		return ffd.CreateParams{Lane: lane, ConcurrencyKey: "acct", Payload: []byte(strconv.Itoa(i)), MaxAttempts: 10,
			Retry: ffd.RetryPolicy{Base: 5 * time.Millisecond, Max: 10 * time.Millisecond}}
	}
	var ps []ffd.CreateParams
	for i := range 5 {
		ps = append(ps, params(i))
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	strict := ffd.OrderStrict
	if k, err := f.client.SetKey(f.ctx, lane, "acct", ffd.KeyParams{Order: &strict}); err != nil || k.Order != ffd.OrderStrict {
		t.Fatalf("make the key strict: %+v, %v", k, err)
	}
	ps = nil
	for i := 5; i < 75; i++ {
		ps = append(ps, params(i))
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil { // by COPY
		t.Fatal(err)
	}
	for i := 75; i < 90; i++ {
		if _, err := f.client.Create(f.ctx, params(i)); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var starts []int
	var running, overlaps atomic.Int32
	h := func(_ context.Context, j *ffd.Job) ([]byte, error) {
		if running.Add(1) > 1 {
			overlaps.Add(1)
		}
		defer running.Add(-1)
		i, _ := strconv.Atoi(string(j.Payload))
		mu.Lock()
		starts = append(starts, i)
		mu.Unlock()
		if (i+j.Attempt)%3 == 0 && j.Attempt < j.MaxAttempts {
			return nil, fmt.Errorf("flaky %d", i)
		}
		return nil, nil
	}
	f.daemon(t)
	f.worker(t, lane, h)
	f.worker(t, lane, h)
	f.waitCount(t, "90 strictly ordered executions", 90, `SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed'`, lane)
	if overlaps.Load() > 0 {
		t.Fatalf("%d times two executions of the strict key ran at once", overlaps.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	var order []int
	for i, x := range starts {
		if i == 0 || starts[i-1] != x {
			order = append(order, x)
		}
	}
	want := make([]int, 90)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(order, want) {
		t.Fatalf("started %v; want creation order 0..89, each one's attempts back to back", order)
	}
}

// A batch kind on Citus: batches of at most 10, each execution with its
// own result.
func TestBatchHandlerOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("batch")
	var mu sync.Mutex
	var sizes []int
	k := ffd.NewKinds()
	ffd.HandleBatch(k, "double", 10, 200*time.Millisecond, func(_ context.Context, jobs []*ffd.Job) ([]ffd.BatchResult, error) {
		mu.Lock()
		sizes = append(sizes, len(jobs))
		mu.Unlock()
		out := make([]ffd.BatchResult, len(jobs))
		for i, j := range jobs {
			n, _ := strconv.Atoi(string(j.Payload))
			out[i].Result = []byte(strconv.Itoa(2 * n))
		}
		return out, nil
	})
	f.startWorker(t, ffd.WorkerConfig{Lanes: []string{lane}, Kinds: k, Concurrency: 20})
	var ps []ffd.CreateParams
	for i := range 25 {
		ps = append(ps, ffd.CreateParams{Lane: lane, Kind: "double", Payload: []byte(strconv.Itoa(i))})
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	f.waitCount(t, "25 completions", 25, `SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed'
		AND convert_from(result, 'UTF8')::int = 2 * convert_from(payload, 'UTF8')::int`, lane)
	mu.Lock()
	defer mu.Unlock()
	if slices.Max(sizes) > 10 {
		t.Fatalf("batches of %v; want at most 10", sizes)
	}
}

// Events on Citus: published from Go and from SQL, each twice, fired by
// a daemon: each starts its trigger's flow once, with its derived id, and
// a filtered trigger's execution only when its filter matches.
func TestEventTriggersOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane, event := f.lane("events"), f.prefix+".placed"
	flow := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: lane}}}}
	if _, err := f.client.CreateTrigger(f.ctx, ffd.TriggerParams{Name: f.prefix + ".flow", Event: event, Flow: &flow}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateTrigger(f.ctx, ffd.TriggerParams{Name: f.prefix + ".vip", Event: event,
		Filter: map[string]any{"vip": true}, Execution: &ffd.CreateParams{Lane: lane, Kind: "vip"}}); err != nil {
		t.Fatal(err)
	}
	const n = 100
	ids := make([]string, n)
	for round := range 2 {
		for i := range n {
			key, payload := fmt.Sprint("k", i), fmt.Sprintf(`{"i": %d, "vip": %v}`, i, i%10 == 0)
			var id string
			if (i+round)%2 == 0 {
				p, err := f.client.PublishEvent(f.ctx, ffd.PublishParams{Name: event, Key: key, Payload: []byte(payload)})
				if err != nil {
					t.Fatalf("publish %d: %v", i, err)
				}
				id = p.Event.ID.String()
			} else if err := f.pool.QueryRow(f.ctx, `SELECT ff_publish_event('default', $1, $2, $3::jsonb)::text`, event, key, payload).Scan(&id); err != nil {
				t.Fatalf("publish %d from SQL: %v", i, err)
			}
			if round == 1 && id != ids[i] {
				t.Fatalf("event %d published again: %s, want %s", i, id, ids[i])
			}
			ids[i] = id
		}
	}
	f.daemon(t)
	f.waitCount(t, "100 events fired", n, `SELECT count(*) FROM ff_event WHERE name = $1 AND fired_at IS NOT NULL`, event)
	if c, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND kind = 'vip'`, lane); err != nil || c != n/10 {
		t.Fatalf("%d executions of the filtered trigger, %v; want %d", c, err, n/10)
	}
	if c, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND flow_id IS NOT NULL`, lane); err != nil || c != n {
		t.Fatalf("%d flow members, %v; want one flow of one step per event: %d", c, err, n)
	}
	for _, i := range []int{0, 57, 99} {
		if _, err := f.client.DescribeFlow(f.ctx, ffd.TriggerFlowID(f.prefix+".flow", uuid.MustParse(ids[i]))); err != nil {
			t.Fatalf("the flow of event %d: %v", i, err)
		}
	}
}
