//go:build citus

package citus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

var coordinator string

func TestMain(m *testing.M) {
	coordinator = os.Getenv("FFD_TEST_CITUS_URL")
	if coordinator == "" {
		fmt.Fprintln(os.Stderr, "FFD_TEST_CITUS_URL must name a Citus coordinator (internal/citus/doc.go)")
		os.Exit(2)
	}
	if err := prepare(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, "prepare the Citus database:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// prepare migrates the coordinator's database and places every table not
// placed yet, as `ffd migrate distribution` prints.
func prepare(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, coordinator)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := schema.Up(ctx, pool, time.Minute); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	tables, bad, err := store.CheckDistribution(ctx, pool)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		return fmt.Errorf("not distributable: %v", bad)
	}
	for _, call := range strings.Split(strings.TrimSpace(store.CitusScript(tables)), "\n") {
		name := call[strings.IndexByte(call, '\'')+1:]
		name = name[:strings.IndexByte(name, '\'')]
		var placed bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM citus_tables WHERE table_name = $1::regclass)`, name).Scan(&placed); err != nil {
			return fmt.Errorf("read citus_tables: %w", err)
		}
		if placed {
			continue
		}
		if _, err := pool.Exec(ctx, call); err != nil {
			return fmt.Errorf("%s: %w", call, err)
		}
	}
	if _, err := pool.Exec(ctx, store.CitusSettings); err != nil {
		return fmt.Errorf("%s: %w", store.CitusSettings, err)
	}
	return nil
}

// fixture is one test's client on the coordinator, and a prefix that
// keeps its lanes apart from other tests'.
type fixture struct {
	ctx    context.Context
	pool   *pgxpool.Pool
	client *ffd.Client
	prefix string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	return setupFor(t, 2*time.Minute)
}

// setupFor is setup for a test that runs longer than setup allows.
func setupFor(t *testing.T, timeout time.Duration) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	pool, err := pgxpool.New(ctx, coordinator)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	c, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop(), StallWarning: -1})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ctx: ctx, pool: pool, client: c, prefix: "t" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")}
}

func (f *fixture) lane(name string) string { return f.prefix + "." + name }

// runNoops starts a worker of lane whose handler does nothing, creates n
// executions there in one call, and returns their ids.
func (f *fixture) runNoops(t *testing.T, lane string, n int) map[string]bool {
	t.Helper()
	f.worker(t, lane, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	ps := make([]ffd.CreateParams, n)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: lane}
	}
	xs, err := f.client.CreateMany(f.ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, x := range xs {
		ids[x.ID.String()] = true
	}
	return ids
}

// Create, with and without an idempotency key, and CreateMany, small and
// by COPY, all answer on the coordinator.
func TestCreate(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: f.lane("a")}); err != nil {
		t.Fatalf("create: %v", err)
	}
	r1, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: f.lane("a"), IdempotencyKey: f.prefix})
	if err != nil {
		t.Fatalf("create with a key: %v", err)
	}
	r2, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: f.lane("a"), IdempotencyKey: f.prefix})
	if err != nil || !r2.Existed || r2.Execution.ID != r1.Execution.ID {
		t.Fatalf("create with the same key: %+v, %v; want the first (%s)", r2, err, r1.Execution.ID)
	}
	for _, n := range []int{3, store.CopyThreshold} {
		ps := make([]ffd.CreateParams, n)
		for i := range ps {
			ps[i] = ffd.CreateParams{Lane: f.lane("many")}
		}
		xs, err := f.client.CreateMany(f.ctx, ps)
		if err != nil || len(xs) != n {
			t.Fatalf("create many (%d): %d created, %v", n, len(xs), err)
		}
	}
}

// Claims take the due executions of a lane across the shards, each once,
// the best first: a claim's executions in priority order, and the first
// claim's first of the top priority (the claim's hint is read in the
// lane's order; between reads a claim serves one shard at a time, so
// across claims the order holds per shard: TestShardClaimsAreFair bounds
// the rest). A renewal extends a lease held.
func TestClaimAndRenew(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("claim")
	const n = 12
	for i := range n {
		if _, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane, Priority: i % 3}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[ffd.ExecutionID]bool{}
	for len(seen) < n {
		xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 5})
		if err != nil || len(xs) == 0 {
			t.Fatalf("claim after %d of %d: %d claimed, %v", len(seen), n, len(xs), err)
		}
		if len(seen) == 0 && xs[0].Priority != 2 {
			t.Fatalf("the first claim's first execution has priority %d, want the lane's best (2)", xs[0].Priority)
		}
		last := 3
		for _, x := range xs {
			if seen[x.ID] {
				t.Fatalf("%s claimed twice", x.ID)
			}
			if x.Priority > last {
				t.Fatalf("priority %d after %d within one claim", x.Priority, last)
			}
			seen[x.ID], last = true, x.Priority
			if x.State != ffd.StateRunning || x.LeaseEpoch != 1 {
				t.Fatalf("claimed %s: %s at epoch %d, want running at 1", x.ID, x.State, x.LeaseEpoch)
			}
		}
		r, err := f.client.Renew(f.ctx, xs[0].ID, xs[0].LeaseEpoch)
		if err != nil || !r.LeaseExpiresAt.After(*xs[0].LeaseExpiresAt) {
			t.Fatalf("renew: %+v, %v; want a later expiry than %v", r, err, xs[0].LeaseExpiresAt)
		}
		// A worker's check of the leases it holds (after a reconnect).
		held := []store.LeaseRef{{ID: xs[0].ID, Epoch: xs[0].LeaseEpoch}, {ID: xs[0].ID, Epoch: xs[0].LeaseEpoch + 1}}
		if lost, err := store.LostLeases(f.ctx, f.pool, held); err != nil || len(lost) != 1 || lost[0] != held[1] {
			t.Fatalf("lost leases %+v, %v; want the later epoch's alone", lost, err)
		}
	}
	if xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 5}); err != nil || len(xs) != 0 {
		t.Fatalf("claim of an emptied lane: %d, %v; want nothing", len(xs), err)
	}
}

// Complete, fail with a retry, cancel and revoke, each fenced, and a
// worker's grouped completions over several partitions.
func TestEndings(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("life")
	for range 4 {
		if _, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane}); err != nil {
			t.Fatal(err)
		}
	}
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 4})
	if err != nil || len(xs) != 4 {
		t.Fatalf("claim: %d of 4, %v", len(xs), err)
	}
	if end, err := f.client.Complete(f.ctx, xs[0].ID, xs[0].LeaseEpoch, []byte(`{"ok":1}`)); err != nil || end.State != ffd.StateCompleted {
		t.Errorf("complete: %+v, %v; want completed", end, err)
	}
	if _, err := f.client.Complete(f.ctx, xs[0].ID, xs[0].LeaseEpoch+1, nil); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Errorf("a completion at an epoch never held: %v, want lease lost", err)
	}
	if end, err := f.client.Fail(f.ctx, xs[1].ID, xs[1].LeaseEpoch, ffd.FailParams{Error: "e", Retryable: true}); err != nil || end.State != ffd.StatePending {
		t.Errorf("fail with a retry: %+v, %v; want pending", end, err)
	}
	if end, err := f.client.Cancel(f.ctx, xs[2].ID, "r", "me"); err != nil || end.State != ffd.StateCancelled {
		t.Errorf("cancel: %+v, %v; want cancelled", end, err)
	}
	if rq, err := f.client.Revoke(f.ctx, xs[3].ID, "r"); err != nil || rq.LeaseEpoch != xs[3].LeaseEpoch+1 {
		t.Errorf("revoke: %+v, %v; want the epoch bumped", rq, err)
	}
	// The worker's way: many at once, over several partitions.
	var handled atomic.Int64
	w, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: []string{f.lane("batch")}, Concurrency: 20,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { handled.Add(1); return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]ffd.CreateParams, 200)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: f.lane("batch")}
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	waitFor(t, f, "200 completed by a worker", func() (bool, error) {
		n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed'`, f.lane("batch"))
		return n == 200, err
	})
}

// waitFor polls cond every 20 ms until it holds, for at most a minute.
func waitFor(t *testing.T, f *fixture, what string, cond func() (bool, error)) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ok, err := cond()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (f *fixture) count(sql string, args ...any) (int, error) {
	var n int
	err := f.pool.QueryRow(f.ctx, sql, args...).Scan(&n)
	return n, err
}

// A DAG with all_of and quorum joins runs to the end under a daemon and
// workers on the coordinator: root -> three middles -> an all_of join and
// a quorum-2 join -> a last step after both.
func TestFlowCascade(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.daemon(t)
	lane := f.lane("dag")
	spec := dag(lane, map[string][]string{"m1": {"root"}, "m2": {"root"}, "m3": {"root"},
		"all": {"m1", "m2", "m3"}, "quorum": {"m1", "m2", "m3"}, "last": {"all", "quorum"}},
		map[string]*ffd.Policy{"quorum": {Kind: ffd.Quorum, K: 2}})
	sub, err := f.client.SubmitFlow(f.ctx, spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	f.worker(t, lane, func(context.Context, *ffd.Job) ([]byte, error) { return []byte(`{}`), nil })
	f.waitFlow(t, sub.Flow.ID, ffd.FlowCompleted)
	for _, ref := range []string{"root", "m1", "m2", "m3", "all", "quorum", "last"} {
		if x, err := f.client.Get(f.ctx, sub.Executions[ref].ID); err != nil || x.State != ffd.StateCompleted {
			t.Errorf("%s: %v, %v; want completed", ref, x.State, err)
		}
	}
	// Every sweep step succeeds: a step failing three sweeps in a row
	// (600 ms here) would make the daemon not ready.
	time.Sleep(time.Second)
	if !d.Ready() {
		t.Error("the daemon is not ready: a sweep step fails on Citus")
	}
}

// An any_of join with cancel_remaining: the first sibling to succeed
// satisfies it, and the daemon cancels the two still running (their
// handlers see their leases revoked).
func TestAnyOfCancelsSiblings(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.daemon(t)
	start, fast, slow := f.lane("start"), f.lane("fast"), f.lane("slow")
	spec := dag(slow, map[string][]string{"s1": {"root"}, "s2": {"root"}, "s3": {"root"}, "any": {"s1", "s2", "s3"}},
		map[string]*ffd.Policy{"any": {Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}})
	for i := range spec.Nodes {
		switch spec.Nodes[i].Ref {
		case "root", "any":
			spec.Nodes[i].Params.Lane = start
		case "s1":
			spec.Nodes[i].Params.Lane = fast
		}
	}
	sub, err := f.client.SubmitFlow(f.ctx, spec)
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	f.worker(t, start, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	var revoked atomic.Int64
	f.worker(t, slow, func(ctx context.Context, _ *ffd.Job) ([]byte, error) {
		<-ctx.Done()
		revoked.Add(1)
		return nil, ctx.Err()
	})
	waitFor(t, f, "the slow siblings to run", func() (bool, error) {
		n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'running'`, slow)
		return n == 2, err
	})
	f.worker(t, fast, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	f.waitFlow(t, sub.Flow.ID, ffd.FlowCompleted)
	for ref, want := range map[string]ffd.State{"s1": ffd.StateCompleted, "s2": ffd.StateCancelled, "s3": ffd.StateCancelled, "any": ffd.StateCompleted} {
		if x, err := f.client.Get(f.ctx, sub.Executions[ref].ID); err != nil || x.State != want {
			t.Errorf("%s: %v, %v; want %s", ref, x.State, err, want)
		}
	}
	waitFor(t, f, "both slow handlers to see their leases revoked", func() (bool, error) { return revoked.Load() == 2, nil })
}

// dag builds a flow whose every node runs on lane: deps maps a node to
// the nodes it waits for ("root" waits for none), policies the joins that
// are not all_of.
func dag(lane string, deps map[string][]string, policies map[string]*ffd.Policy) ffd.SubmitFlowParams {
	spec := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "root", Params: ffd.CreateParams{Lane: lane}}}}
	refs := make([]string, 0, len(deps))
	for ref := range deps {
		refs = append(refs, ref)
	}
	slices.Sort(refs)
	for _, ref := range refs {
		spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}, Policy: policies[ref]})
		for _, from := range deps[ref] {
			spec.Edges = append(spec.Edges, ffd.SubmitEdge{From: from, To: ref})
		}
	}
	return spec
}

// waitFlow waits for flow id to finish, and fails t unless it ends in
// want.
func (f *fixture) waitFlow(t *testing.T, id uuid.UUID, want ffd.FlowState) {
	t.Helper()
	waitFor(t, f, "the flow to finish", func() (bool, error) {
		fl, err := f.client.DescribeFlow(f.ctx, id)
		return err == nil && fl.State != ffd.FlowOpen, err
	})
	if fl, err := f.client.DescribeFlow(f.ctx, id); err != nil || fl.State != want {
		t.Fatalf("flow: %v, %v; want %s", fl.State, err, want)
	}
}

// daemon runs a daemon against the coordinator until the test ends.
func (f *fixture) daemon(t *testing.T) *ffd.Daemon {
	t.Helper()
	d, err := ffd.NewDaemon(f.pool, &ffd.DaemonConfig{Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), SweepInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := d.Stop(ctx); err != nil {
			t.Errorf("stop the daemon: %v", err)
		}
	})
	return d
}

// worker runs a worker on lane until the test ends.
func (f *fixture) worker(t *testing.T, lane string, h ffd.HandlerFunc) {
	t.Helper()
	f.startWorker(t, ffd.WorkerConfig{Lanes: []string{lane}, Concurrency: 8, Handler: h})
}

// startWorker runs a worker of cfg until the test ends.
func (f *fixture) startWorker(t *testing.T, cfg ffd.WorkerConfig) {
	t.Helper()
	w, err := ffd.NewWorker(f.client, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Stop(ctx); err != nil {
			t.Errorf("stop the worker: %v", err)
		}
	})
}

// cancel_flow fences a running member and cancels the rest.
func TestCancelFlow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("cf")
	sub, err := f.client.SubmitFlow(f.ctx, dag(lane, map[string][]string{"a": {"root"}, "b": {"root"}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim the root: %d, %v", len(xs), err)
	}
	res, err := f.client.CancelFlow(f.ctx, sub.Flow.ID, ffd.CancelAll, "stop")
	if err != nil || len(res.Members) != 3 {
		t.Fatalf("cancel flow: %+v, %v; want its three members", res, err)
	}
	if _, err := f.client.Complete(f.ctx, xs[0].ID, xs[0].LeaseEpoch, nil); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Errorf("the fenced root's completion: %v, want lease lost", err)
	}
	if fl, err := f.client.DescribeFlow(f.ctx, sub.Flow.ID); err != nil || fl.State != ffd.FlowCancelled {
		t.Errorf("flow: %+v, %v; want cancelled", fl, err)
	}
}

// A paused lane gives nothing; a capped one at most its cap.
func TestLanes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("ctl")
	ps := make([]ffd.CreateParams, 6)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: lane}
	}
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.PauseLane(f.ctx, lane); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 6}); err != nil || len(xs) != 0 {
		t.Fatalf("claim from a paused lane: %d, %v; want nothing", len(xs), err)
	}
	if _, err := f.client.ResumeLane(f.ctx, lane); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := f.client.SetLaneLimit(f.ctx, lane, 2); err != nil {
		t.Fatalf("cap: %v", err)
	}
	if xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 6}); err != nil || len(xs) != 2 {
		t.Fatalf("claim from a lane capped at 2: %d, %v; want 2", len(xs), err)
	}
}

// Lane statistics are sampled on the coordinator (a multi-shard count
// written to reference tables), one sampler at a time, and read back.
// The database is shared, so the test samples with no interval (other
// tests' lanes come and go) and looks for its own lane.
func TestLaneStats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("stats")
	ps := make2(lane, 5)
	ps[4].Delay = time.Hour
	if _, err := f.client.CreateMany(f.ctx, ps); err != nil {
		t.Fatal(err)
	}
	if xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 1}); err != nil || len(xs) != 1 {
		t.Fatalf("claim: %d, %v", len(xs), err)
	}
	waitFor(t, f, "a sample of the lanes", func() (bool, error) {
		return store.SampleLaneStats(f.ctx, f.pool, 0, "citus-test")
	})
	stats, at, err := store.LaneStats(f.ctx, f.pool)
	if err != nil || at.IsZero() {
		t.Fatalf("read lane statistics: %v (sampled at %v)", err, at)
	}
	var got *store.LaneStat
	for i := range stats {
		if stats[i].Lane == lane {
			got = &stats[i]
		}
	}
	if want := (store.LaneLoad{Lane: lane, Pending: 3, Delayed: 1, Running: 1}); got == nil || got.LaneLoad != want || got.OldestDueAt == nil {
		t.Fatalf("lane %s: %+v, want %+v with its oldest due time", lane, got, want)
	}
	// A sampler holding the lock keeps a second one out.
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.ctx) //nolint:errcheck
	if _, err := tx.Exec(f.ctx, `SELECT pg_advisory_xact_lock($1)`, store.LaneSampleLock); err != nil {
		t.Fatal(err)
	}
	if ok, err := store.SampleLaneStats(f.ctx, f.pool, 0, "citus-test"); err != nil || ok {
		t.Fatalf("a second sampler while the first holds the lock: sampled %v (%v), want none", ok, err)
	}
}

// A schedule fires under the daemon.
func TestSchedule(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.daemon(t)
	lane := f.lane("tick")
	if _, err := f.client.CreateSchedule(f.ctx, ffd.ScheduleParams{Name: f.prefix + ".tick", Cron: "@every 1s",
		Execution: &ffd.CreateParams{Lane: lane}}); err != nil {
		t.Fatalf("create schedule: %v", err)
	}
	waitFor(t, f, "two ticks", func() (bool, error) {
		n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1`, lane)
		return n >= 2, err
	})
	if _, err := f.client.PauseSchedule(f.ctx, f.prefix+".tick"); err != nil {
		t.Fatalf("pause schedule: %v", err)
	}
}

// A named consumer reads every event of its lanes' executions exactly
// once, while they are written.
func TestConsumer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("events")
	const n = 1000
	got := make(chan ffd.OutboxEvent, 4*n)
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.client.Consume(ctx, ffd.ConsumeParams{Name: f.prefix + "-c", Stream: ffd.StreamCompletion, PollInterval: 100 * time.Millisecond,
			Handler: func(_ context.Context, _ pgx.Tx, evs []ffd.OutboxEvent) error {
				for _, e := range evs {
					got <- e
				}
				return nil
			}})
	}()
	want := f.runNoops(t, lane, n)
	seen := map[int64]bool{}
	const stall = time.Minute // the longest wait for one more event
	idle := time.NewTimer(stall)
	defer idle.Stop()
	for len(want) > 0 {
		select {
		case e := <-got:
			if seen[e.EventID] {
				t.Fatalf("event %d read twice", e.EventID)
			}
			seen[e.EventID] = true
			delete(want, e.ExecutionID)
			idle.Reset(stall)
		case <-idle.C:
			t.Fatalf("%d of %d completions not read, none for %s (the stall budget)", len(want), n, stall)
		}
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("consume: %v", err)
	}
	// The console's and the daemon's view of it: read on Citus too.
	lags, err := store.ConsumerLags(f.ctx, f.pool)
	if err != nil {
		t.Fatalf("consumer lags: %v", err)
	}
	found := false
	for _, l := range lags {
		if l.Name == f.prefix+"-c" {
			found = true
			if l.Stream != "completion" {
				t.Errorf("consumer %s: stream %q, want completion", l.Name, l.Stream)
			}
		}
	}
	if !found {
		t.Errorf("consumer %s-c not among the lags: %+v", f.prefix, lags)
	}
}

// Retention deletes finished executions and flows, partition by
// partition. Not parallel: it deletes whatever finished in the database.
func TestRetention(t *testing.T) {
	f := setup(t)
	lane := f.lane("old")
	if _, err := f.client.CreateMany(f.ctx, []ffd.CreateParams{{Lane: lane}, {Lane: lane}, {Lane: lane}, {Lane: lane, MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	sub, err := f.client.SubmitFlow(f.ctx, dag(lane, map[string][]string{"a": {"root"}}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CancelFlow(f.ctx, sub.Flow.ID, ffd.CancelAll, "done"); err != nil {
		t.Fatal(err)
	}
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 4})
	if err != nil || len(xs) != 4 {
		t.Fatalf("claim: %d, %v", len(xs), err)
	}
	for _, x := range xs {
		if x.MaxAttempts == 1 { // a dead letter
			_, err = f.client.Fail(f.ctx, x.ID, x.LeaseEpoch, ffd.FailParams{Error: "boom"})
		} else {
			_, err = f.client.Complete(f.ctx, x.ID, x.LeaseEpoch, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// The cancelled members' events, which no daemon here dispatches,
	// hold their flow back: the sweep's dispatch takes them.
	if _, err := cascade.New(f.pool, nil).DispatchBatch(f.ctx, 1000, 0); err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	time.Sleep(10 * time.Millisecond)
	// Dead letters kept forever first, then for a millisecond.
	ages := store.Ages{Default: time.Millisecond, Dead: -1}
	if n, err := store.DeleteFinishedExecutions(f.ctx, f.pool, ages, 100000); err != nil || n < 3 {
		t.Fatalf("retention of executions: %d, %v; want at least 3", n, err)
	}
	if n, err := store.DeleteFinishedFlows(f.ctx, f.pool, ages, 100000); err != nil || n < 1 {
		t.Fatalf("retention of flows: %d, %v; want at least 1", n, err)
	}
	if n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'failed'`, lane); err != nil || n != 1 {
		t.Fatalf("%d dead letters of the lane left, %v; want the one, kept forever", n, err)
	}
	ages.Dead = time.Millisecond
	if n, err := store.DeleteFinishedExecutions(f.ctx, f.pool, ages, 100000); err != nil || n < 1 {
		t.Fatalf("retention of dead letters: %d, %v; want at least 1", n, err)
	}
	if n, err := f.count(`SELECT count(*) FROM ff_execution WHERE lane = $1`, lane); err != nil || n != 0 {
		t.Fatalf("%d executions of the lane left, %v; want none", n, err)
	}
}

// The WAL stream follows every worker node, one slot of the same name on
// each: 500 completions across the shards arrive, each at least once
// (named by its distributed table, not its shard), and dropping the slot
// drops it on every node.
func TestWALStream(t *testing.T) {
	t.Parallel()
	f := setup(t)
	lane := f.lane("wal")
	slot := "w_" + f.prefix
	const n = 500
	got := make(chan ffd.OutboxEvent, 8*n)
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(f.ctx)
	done := make(chan error, 1)
	go func() {
		done <- ffd.StreamWAL(ctx, ffd.WALConfig{ConnString: coordinator, Slot: slot, StatusInterval: 200 * time.Millisecond,
			OnStart: func() { close(started) },
			Handler: func(_ context.Context, evs []ffd.OutboxEvent) error {
				for _, e := range evs {
					got <- e
				}
				return nil
			}})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the stream ended before starting: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the stream did not start within a minute")
	}
	nodes, err := f.count(`SELECT count(*) FROM pg_dist_node WHERE isactive AND noderole = 'primary' AND groupid > 0`)
	if err != nil {
		t.Fatal(err)
	}
	slots, err := f.count(`SELECT count(*) FROM run_command_on_workers($$SELECT count(*) FROM pg_replication_slots WHERE slot_name = '` + slot + `'$$) WHERE result = '1'`)
	if err != nil || slots != nodes || nodes < 1 {
		t.Fatalf("slot %s on %d of %d worker nodes (%v), want every one", slot, slots, nodes, err)
	}
	want := f.runNoops(t, lane, n)
	deadline := time.After(2 * time.Minute)
	for len(want) > 0 {
		select {
		case e := <-got:
			if e.Stream == ffd.StreamCompletion {
				delete(want, e.ExecutionID)
			}
		case err := <-done:
			t.Fatalf("the stream ended with %d of %d completions not delivered: %v", len(want), n, err)
		case <-deadline:
			t.Fatalf("%d of %d completions not streamed within two minutes", len(want), n)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("a cancelled stream returned %v, want nil", err)
	}
	dctx, dcancel := context.WithTimeout(f.ctx, time.Minute)
	defer dcancel()
	if err := ffd.DropWALSlot(dctx, coordinator, slot); err != nil {
		t.Fatalf("drop the slot: %v", err)
	}
	if left, err := f.count(`SELECT count(*) FROM run_command_on_workers($$SELECT count(*) FROM pg_replication_slots WHERE slot_name = '` + slot + `'$$) WHERE result <> '0'`); err != nil || left != 0 {
		t.Fatalf("slot left on %d nodes after dropping it (%v)", left, err)
	}
}

// `ffd demo` against the coordinator: every step ends as the DAG implies
// (the demo exits non-zero otherwise).
func TestDemo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "run", "../../cmd/ffd", "demo", "--database-url", coordinator, "--log-level", "warn").CombinedOutput()
	if err != nil {
		t.Fatalf("ffd demo against the coordinator: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "every step ended as the DAG implies") {
		t.Fatalf("ffd demo exited 0 without saying every step ended as the DAG implies:\n%s", out)
	}
}
