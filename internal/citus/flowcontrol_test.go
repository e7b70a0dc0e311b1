//go:build citus

package citus_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// keyed is n executions of lane under key with limit (0: none).
func keyed(lane, key string, limit, n int) []ffd.CreateParams {
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: lane, ConcurrencyKey: key, ConcurrencyLimit: limit}
	}
	return ps
}

func (f *fixture) createAll(t *testing.T, ps ...[]ffd.CreateParams) {
	t.Helper()
	for _, p := range ps {
		if _, err := f.client.CreateMany(f.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) claimKeys(t *testing.T, lane string, max int) map[string]int {
	t.Helper()
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w", Max: max})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, x := range xs {
		got[x.ConcurrencyKey]++
	}
	return got
}

// keysTogether names each of keys (those after the first with a suffix)
// so that all lie on the first one's partition in lane: one keyed claim
// on Citus then may take from each of them (a turn takes from the shards
// of its first key and of one more: store's turnFocus). A name with a
// suffix is the only way: a key's partition is a linear function of its
// bytes, so keys of one length differ by the same partitions in every
// lane.
func keysTogether(t *testing.T, lane string, keys []string) map[string]string {
	t.Helper()
	names := map[string]string{keys[0]: keys[0]}
	home := ident.ConcurrencyKeyPartition(lane, keys[0])
	for _, k := range keys[1:] {
		for i := 0; names[k] == ""; i++ {
			if i == 1<<20 {
				t.Fatalf("no name %s* on partition %d in lane %s", k, home, lane)
			}
			if n := fmt.Sprint(k, "-", i); ident.ConcurrencyKeyPartition(lane, n) == home {
				names[k] = n
			}
		}
	}
	return names
}

// One claim on Citus takes what it takes on one Postgres: limits, turns,
// weights, rates, the lane's cap; the lists say what is held back. The
// keys of a case lie on one partition when it has more than two groups
// to take from (together), as one claim takes from few shards.
func TestKeyedClaimOnCitus(t *testing.T) {
	t.Parallel()
	three := 3
	cases := []struct {
		name     string
		together []string
		setup    func(f *fixture, lane string, k map[string]string)
		max      int
		want     string
	}{
		{"limit, other keys, unkeyed", []string{"a", "b"}, func(f *fixture, lane string, k map[string]string) {
			f.createAll(t, keyed(lane, k["a"], 1, 3), keyed(lane, k["b"], 0, 2), make2(lane, 2))
		}, 10, "map[:2 a:1 b:2]"},
		{"turns", []string{"a", "b", "c"}, func(f *fixture, lane string, k map[string]string) {
			f.createAll(t, keyed(lane, k["a"], 0, 5), keyed(lane, k["b"], 0, 5), keyed(lane, k["c"], 0, 5))
		}, 3, "map[a:1 b:1 c:1]"},
		{"hot key", nil, func(f *fixture, lane string, _ map[string]string) { f.createAll(t, keyed(lane, "hot", 0, 20)) }, 7, "map[hot:7]"},
		{"weights", nil, func(f *fixture, lane string, _ map[string]string) {
			f.createAll(t, keyed(lane, "heavy", 0, 10), keyed(lane, "light", 0, 10))
			if _, err := f.client.SetKey(f.ctx, lane, "heavy", ffd.KeyParams{Weight: &three}); err != nil {
				t.Fatal(err)
			}
		}, 4, "map[heavy:3 light:1]"},
		{"key rate", nil, func(f *fixture, lane string, _ map[string]string) {
			f.createAll(t, keyed(lane, "api", 0, 10), make2(lane, 1))
			if _, err := f.client.SetKey(f.ctx, lane, "api", ffd.KeyParams{Rate: &ffd.Rate{Count: 2, Per: time.Hour}}); err != nil {
				t.Fatal(err)
			}
		}, 10, "map[:1 api:1]"},
		{"lane cap", nil, func(f *fixture, lane string, _ map[string]string) {
			f.createAll(t, keyed(lane, "a", 0, 5), keyed(lane, "b", 0, 5))
			if _, err := f.client.SetLaneLimit(f.ctx, lane, 3); err != nil {
				t.Fatal(err)
			}
		}, 10, "map[a:2 b:1]"},
		{"lane rate", nil, func(f *fixture, lane string, _ map[string]string) {
			f.createAll(t, make2(lane, 10))
			if _, err := f.client.SetLaneRate(f.ctx, lane, ffd.Rate{Count: 4, Per: time.Hour, Burst: 4}); err != nil {
				t.Fatal(err)
			}
		}, 10, "map[:4]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			lane := f.lane("keyed")
			var names map[string]string
			if tc.together != nil {
				names = keysTogether(t, lane, tc.together)
			}
			tc.setup(f, lane, names)
			took := map[string]int{}
			for k, n := range f.claimKeys(t, lane, tc.max) {
				took[strings.Split(k, "-")[0]] += n // by the name the case gives it
			}
			if got := fmt.Sprint(took); got != tc.want {
				t.Fatalf("claim of %d took %s by key; want %s", tc.max, got, tc.want)
			}
		})
	}
	t.Run("weights across claims of one slot", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		lane := f.lane("turns")
		f.createAll(t, keyed(lane, "heavy", 0, 12), keyed(lane, "light", 0, 12))
		three := 3
		if _, err := f.client.SetKey(f.ctx, lane, "heavy", ffd.KeyParams{Weight: &three}); err != nil {
			t.Fatal(err)
		}
		var order strings.Builder
		for range 12 {
			for k := range f.claimKeys(t, lane, 1) {
				order.WriteString(k[:1])
			}
		}
		if got := order.String(); got != "hhhlhhhlhhhl" {
			t.Fatalf("claims of one slot started %s; want turns of three heavy and one light", got)
		}
	})
	t.Run("lists and throttle", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		lane := f.lane("held")
		f.createAll(t, keyed(lane, "acme", 1, 4))
		if got := f.claimKeys(t, lane, 10); got["acme"] != 1 {
			t.Fatalf("claimed %v", got)
		}
		ls, err := f.client.ListLanes(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, l := range ls {
			if l.Name == lane {
				found = true
				if !l.Keyed || l.Keys != 1 || l.KeysHeld != 1 || l.WaitingHeld != 3 || l.Running != 1 || l.Due != 3 {
					t.Fatalf("ListLanes: %+v; want keyed, 1 key holding 3 back, 1 running, 3 due", l)
				}
			}
		}
		if !found {
			t.Fatalf("ListLanes lacks %s", lane)
		}
		ks, err := f.client.ListKeys(f.ctx, ffd.ListKeysParams{Lane: lane})
		if err != nil || len(ks) != 1 || ks[0].Key != "acme" || !ks[0].Held || ks[0].Running != 1 {
			t.Fatalf("ListKeys: %v %v; want acme alone (the lane has no unkeyed work), held, 1 running", ks, err)
		}
	})
}

func make2(lane string, n int) []ffd.CreateParams {
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i].Lane = lane
	}
	return ps
}

// A key of limit 1 never has two running on Citus, sampled every 10 ms
// for a minute under three workers; 10 executions of tenant B created
// after 2,000 of tenant A finish among the first of A's.
func TestKeyLimitAndFairnessOnCitus(t *testing.T) {
	t.Parallel()
	f := setupFor(t, 4*time.Minute)
	f.daemon(t)
	lane := f.lane("limit")
	f.createAll(t, keyed(lane, "one", 1, 2000), keyed(lane, "A", 0, 2000))
	f.createAll(t, keyed(lane, "B", 0, 10))
	var mu sync.Mutex
	running, peak := 0, 0
	for range 3 {
		f.worker(t, lane, func(ctx context.Context, j *ffd.Job) ([]byte, error) {
			if j.ConcurrencyKey == "one" {
				mu.Lock()
				running++
				peak = max(peak, running)
				mu.Unlock()
				time.Sleep(5 * time.Millisecond)
				mu.Lock()
				running--
				mu.Unlock()
			}
			return nil, nil
		})
	}
	// A count over every shard takes a good part of a second on a busy
	// cluster, so several samplers take turns: a sample starts every
	// 10 ms or so. The handlers' own count sees every overlap.
	var samples, worst atomic.Int64
	var sampling sync.WaitGroup
	end := time.Now().Add(time.Minute)
	for i := range 16 {
		sampling.Add(1)
		go func() {
			defer sampling.Done()
			time.Sleep(time.Duration(i) * 10 * time.Millisecond)
			for time.Now().Before(end) {
				n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND concurrency_key = 'one' AND state = 'running'`, lane)
				if err != nil {
					t.Error(err)
					return
				}
				samples.Add(1)
				for w := worst.Load(); int64(n) > w && !worst.CompareAndSwap(w, int64(n)); w = worst.Load() {
				}
				time.Sleep(10 * time.Millisecond)
			}
		}()
	}
	sampling.Wait()
	mu.Lock()
	defer mu.Unlock()
	if worst.Load() > 1 || peak > 1 {
		t.Fatalf("key one ran %d at once (sampled %d times), %d in handlers; want at most 1", worst.Load(), samples.Load(), peak)
	}
	before, err := f.count(`SELECT count(*) FROM ff_execution a WHERE a.lane = $1 AND a.concurrency_key = 'A' AND a.state = 'completed'
		AND a.terminal_at <= (SELECT max(terminal_at) FROM ff_execution b WHERE b.lane = $1 AND b.concurrency_key = 'B' AND b.state = 'completed')`, lane)
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND concurrency_key = 'B' AND state = 'completed'`, lane)
	if err != nil || b != 10 || before > 40 {
		t.Fatalf("%d of B's 10 completed, after %d of A's 2,000; want all 10 within the first 2 %% (40) (%v)", b, before, err)
	}
	t.Logf("%d samples; B's 10 finished after %d of A's", samples.Load(), before)
}

// A lane's rate of 600 a minute on Citus, across two workers: no three
// minutes hold more starts than the rate allows (and the first second's
// burst) plus 5 %, and the lane keeps starting work until that many have
// started. The rate is read from the starts' own times (the database's
// clock), and the wait is for progress: a loaded machine may start them
// more slowly, never faster.
func TestLaneRateOnCitus(t *testing.T) {
	t.Parallel()
	f := setupFor(t, 15*time.Minute)
	lane := f.lane("rate")
	const window, want = 3 * time.Minute, 1810 // 600 a minute for three minutes, and the first second's burst
	f.createAll(t, make2(lane, 2500))
	if _, err := f.client.SetLaneRate(f.ctx, lane, ffd.Rate{Count: 600, Per: time.Minute}); err != nil {
		t.Fatal(err)
	}
	f.worker(t, lane, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	f.worker(t, lane, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	const stall = 30 * time.Second // the longest wait for one more start
	last, lastAt := 0, time.Now()
	for last < want {
		n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND started_at IS NOT NULL`, lane)
		if err != nil {
			t.Fatal(err)
		}
		if n > last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > stall {
			t.Fatalf("%d of %d starts, then none for %s (the stall budget)", last, want, stall)
		}
		time.Sleep(time.Second)
	}
	rows, err := f.pool.Query(f.ctx, `SELECT started_at FROM ff_execution WHERE lane = $1 AND started_at IS NOT NULL ORDER BY started_at`, lane)
	if err != nil {
		t.Fatal(err)
	}
	starts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	most := 0 // the most starts within any window, from each start
	for i, j := 0, 0; i < len(starts); i++ {
		for j < len(starts) && starts[j].Before(starts[i].Add(window)) {
			j++
		}
		most = max(most, j-i)
	}
	if limit := want * 105 / 100; most > limit {
		t.Fatalf("%d starts within %s; the rate allows %d (+5%%: %d)", most, window, want, limit)
	}
	t.Logf("at most %d starts within %s at 600/min (allowed %d); %d started in %s", most, window, want, len(starts), starts[len(starts)-1].Sub(starts[0]).Round(time.Second))
}

// The sweep of idle keys on Citus forgets each key whose executions all
// ended, keeps a configured key and a busy one, and tells a key idle in
// one lane from one of the same name busy in another.
func TestForgetIdleKeysOnCitus(t *testing.T) {
	t.Parallel()
	f := setup(t)
	a, b := f.lane("forget-a"), f.lane("forget-b")
	var ps []ffd.CreateParams
	for i := range 30 {
		ps = append(ps, keyed(a, fmt.Sprintf("idle-%02d", i), 1, 1)...)
	}
	f.createAll(t, ps, keyed(a, "shared", 1, 1), keyed(b, "shared", 1, 1), keyed(b, "busy", 1, 1))
	one := 1
	if _, err := f.client.SetKey(f.ctx, a, "kept", ffd.KeyParams{MaxRunning: &one}); err != nil {
		t.Fatal(err)
	}
	rows, err := f.pool.Query(f.ctx, `SELECT partition_key, execution_id FROM ff_execution
		WHERE (lane = $1 AND concurrency_key LIKE 'idle-%') OR (lane = $2 AND concurrency_key = 'shared')`, a, b)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ffd.ExecutionID])
	if err != nil || len(ids) != 31 {
		t.Fatalf("read the executions to cancel: %d, %v; want 31", len(ids), err)
	}
	for _, id := range ids {
		if _, err := f.client.Cancel(f.ctx, id, "test", "test"); err != nil {
			t.Fatal(err)
		}
	}
	// A daemon of another test may forget some of them first: what is
	// left says whether they went.
	if _, err := store.ForgetIdleKeys(f.ctx, f.pool, 10_000); err != nil {
		t.Fatalf("ForgetIdleKeys: %v", err)
	}
	rows, err = f.pool.Query(f.ctx, `SELECT lane || '/' || key FROM ff_key WHERE lane IN ($1, $2) AND key <> '' ORDER BY 1`, a, b)
	if err != nil {
		t.Fatal(err)
	}
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if want := fmt.Sprint([]string{a + "/kept", a + "/shared", b + "/busy"}); err != nil || fmt.Sprint(left) != want {
		t.Fatalf("keys left %v, %v; want %s", left, err, want)
	}
}
