package daemon_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	*testdb.Fixture
	client *ffd.Client
}

func setup(t *testing.T) *fixture {
	t.Helper()
	tf := testdb.Checked(t, 5*time.Minute)
	client, err := ffd.NewClient(tf.Pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{Fixture: tf, client: client}
}

// pool opens a pool of its own, as a separate daemon process would.
func (f *fixture) pool(maxConns int32) *pgxpool.Pool {
	f.T.Helper()
	cfg, err := pgxpool.ParseConfig(f.DB.URL)
	if err != nil {
		f.T.Fatal(err)
	}
	cfg.MaxConns = maxConns
	p, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(p.Close)
	return p
}

// startDaemon starts a daemon, waits until it is ready, and stops it
// when the test ends (unless the test stopped it already).
func (f *fixture) startDaemon(cfg daemon.Config) *daemon.Daemon {
	f.T.Helper()
	if cfg.Pool == nil {
		cfg.Pool = f.pool(8)
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = 200 * time.Millisecond
	}
	if cfg.StopTimeout == 0 {
		cfg.StopTimeout = 10 * time.Second
	}
	d, err := daemon.New(cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		f.T.Fatalf("start the daemon: %v", err)
	}
	f.T.Cleanup(func() {
		if err := d.Stop(context.Background()); err != nil {
			f.T.Errorf("daemon: %v", err)
		}
	})
	return d
}

func (f *fixture) startWorker(lanes []string, concurrency int, h ffd.HandlerFunc) *ffd.Worker {
	f.T.Helper()
	w, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: lanes, Concurrency: concurrency, Handler: h, PollInterval: 200 * time.Millisecond})
	if err != nil {
		f.T.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

func (f *fixture) quiet() func() bool {
	return func() bool {
		return f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`) == 0 &&
			f.Count(`SELECT count(*) FROM ff_pending_cancel_group`) == 0
	}
}

func (f *fixture) quiescent() {
	f.T.Helper()
	if err := store.CheckQuiescent(f.Ctx, f.DB.Pool); err != nil {
		f.T.Fatalf("invariants at rest: %v", err)
	}
}

// A DAG with fan-out, an any_of race with cancel_remaining, and a failure
// that skips a branch runs to the end with a daemon and a worker; the
// daemon logs each hop's latency at Debug (a line per decided group is
// routine, not worth an operator's Info stream).
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	f := setup(t)
	core, logs := observer.New(zap.DebugLevel)
	f.startDaemon(daemon.Config{Logger: zap.New(core)})
	lane := "e2e-" + uuid.NewString()[:8]
	node := func(ref, kind string) ffd.SubmitNode {
		return ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane, Kind: kind, MaxAttempts: 1}}
	}
	race := ffd.SubmitNode{Ref: "race", Params: ffd.CreateParams{Lane: lane, Kind: "ok"}, Policy: &ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{node("start", "ok"), node("fast", "ok"), node("slow", "slow"), node("bad", "fail"),
			node("after-bad", "ok"), race, node("end", "ok")},
		Edges: []ffd.SubmitEdge{{From: "start", To: "fast"}, {From: "start", To: "slow"}, {From: "start", To: "bad"},
			{From: "bad", To: "after-bad"}, {From: "fast", To: "race"}, {From: "slow", To: "race"}, {From: "race", To: "end"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.startWorker([]string{lane}, 8, func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		switch job.Kind {
		case "fail":
			return nil, ffd.Permanent(fmt.Errorf("planned failure"))
		case "slow":
			<-ctx.Done() // cancelled as the losing sibling
			return nil, context.Cause(ctx)
		}
		return []byte("ok"), nil
	})
	f.WaitFor("flow to finish", func() bool {
		fl, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
		return err == nil && fl.State != ffd.FlowOpen
	})
	f.WaitFor("cascade to settle", f.quiet())
	want := map[string]ffd.State{"start": ffd.StateCompleted, "fast": ffd.StateCompleted, "slow": ffd.StateCancelled,
		"bad": ffd.StateFailed, "after-bad": ffd.StateSkipped, "race": ffd.StateCompleted, "end": ffd.StateCompleted}
	for ref, st := range want {
		x, _ := f.client.Get(f.Ctx, sub.Executions[ref].ID)
		if x.State != st {
			t.Errorf("%s: %s, want %s", ref, x.State, st)
		}
	}
	fl, _ := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
	if fl.State != ffd.FlowFailed {
		t.Fatalf("flow %s, want failed (one member failed)", fl.State)
	}
	hops := logs.FilterMessage("edge group decided").All()
	if len(hops) == 0 {
		t.Fatal("no hop was logged")
	}
	for _, e := range hops {
		if _, ok := e.ContextMap()["hop_latency"]; !ok {
			t.Fatalf("hop log without hop_latency: %v", e.ContextMap())
		}
		if e.Level != zap.DebugLevel {
			t.Fatalf("edge group decided logged at %s, want debug", e.Level)
		}
	}
	f.quiescent()
}

// completeBurst creates n solo-flow pairs a->b and completes every a, so
// that n completion events need dispatching.
func (f *fixture) completeBurst(n int) (lane string) {
	f.T.Helper()
	lane = "burst-" + uuid.NewString()[:8]
	for range n / 100 {
		p := ffd.SubmitFlowParams{}
		for j := range 100 {
			p.Nodes = append(p.Nodes,
				ffd.SubmitNode{Ref: fmt.Sprint("a", j), Params: ffd.CreateParams{Lane: lane}},
				ffd.SubmitNode{Ref: fmt.Sprint("b", j), Params: ffd.CreateParams{Lane: lane + "-next"}})
			p.Edges = append(p.Edges, ffd.SubmitEdge{From: fmt.Sprint("a", j), To: fmt.Sprint("b", j)})
		}
		if _, err := f.client.SubmitFlow(f.Ctx, p); err != nil {
			f.T.Fatal(err)
		}
	}
	return lane
}

func (f *fixture) completeAll(lane string, total int) {
	f.T.Helper()
	f.claimAndComplete(lane)
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed'`, lane); n != total {
		f.T.Fatalf("%d completed, want %d", n, total)
	}
}

// claimAndComplete works a lane empty with four claimers; safe to run in a
// goroutine of its own (it reports with t.Error).
func (f *fixture) claimAndComplete(lane string) {
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: lane, Worker: fmt.Sprintf("burst%d/1", w), Max: 50})
				if err != nil {
					f.T.Error(err)
					return
				}
				if len(xs) == 0 {
					return
				}
				for _, x := range xs {
					if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err != nil {
						f.T.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
}

// With the listener's backend killed again and again during a burst of
// 2,000 completions, every event is still dispatched exactly once.
func TestListenerKilledDuringBurst(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.startDaemon(daemon.Config{})
	lane := f.completeBurst(2000)
	killer, err := pgx.Connect(f.Ctx, f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(context.Background())
	stop := make(chan struct{})
	var kills sync.WaitGroup
	kills.Add(1)
	killed := 0
	go func() {
		defer kills.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			if pids, err := store.Backends(f.Ctx, killer, daemon.ListenApplicationName); err == nil && len(pids) > 0 {
				if n, err := store.TerminateBackends(f.Ctx, killer, pids); err == nil {
					killed += n
				}
			}
		}
	}()
	f.completeAll(lane, 2000)
	close(stop)
	kills.Wait()
	f.WaitFor("every event dispatched", f.quiet())
	if killed == 0 || d.Reconnects() == 0 {
		t.Fatalf("the listener was never killed (%d kills, %d reconnects): the test proves nothing", killed, d.Reconnects())
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'pending'`, lane+"-next"); n != 2000 {
		t.Fatalf("%d downstreams ready, want 2000", n)
	}
	t.Logf("listener killed %d times, %d reconnects", killed, d.Reconnects())
	f.quiescent()
}

// With LISTEN disabled altogether, the sweep alone dispatches everything.
func TestSweepAloneWithoutListen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon(daemon.Config{DisableListen: true})
	lane := f.completeBurst(2000)
	f.completeAll(lane, 2000)
	f.WaitFor("every event dispatched", f.quiet())
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'pending'`, lane+"-next"); n != 2000 {
		t.Fatalf("%d downstreams ready, want 2000", n)
	}
	f.quiescent()
}

// Three daemons on one database under a random-DAG workload: invariants
// hold, nothing is dispatched twice.
func TestThreeDaemons(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ds []*daemon.Daemon
	for range 3 {
		ds = append(ds, f.startDaemon(daemon.Config{CascadeWorkers: 2}))
	}
	lane := "three-" + uuid.NewString()[:8]
	for seed := range 4 {
		p := ffd.SubmitFlowParams{}
		for i := range 60 {
			kind := "ok"
			if (i*7+seed)%9 == 0 {
				kind = "fail"
			}
			n := ffd.SubmitNode{Ref: fmt.Sprint("n", i), Params: ffd.CreateParams{Lane: lane, Kind: kind, MaxAttempts: 1}}
			preds := 0
			for j := range i {
				if (i*31+j*17+seed)%11 == 0 && preds < 3 {
					p.Edges = append(p.Edges, ffd.SubmitEdge{From: fmt.Sprint("n", j), To: fmt.Sprint("n", i)})
					preds++
				}
			}
			switch {
			case preds > 1 && i%3 == 0:
				n.Policy = &ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}
			case preds > 1 && i%3 == 1:
				n.Policy = &ffd.Policy{Kind: ffd.Quorum, K: 1, OnSatisfied: ffd.LetRun}
			}
			p.Nodes = append(p.Nodes, n)
		}
		if _, err := f.client.SubmitFlow(f.Ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	f.startWorker([]string{lane}, 16, func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		if job.Kind == "fail" {
			return nil, ffd.Permanent(fmt.Errorf("planned"))
		}
		return nil, nil
	})
	f.WaitFor("every flow to finish", func() bool {
		return f.Count(`SELECT count(*) FROM ff_flow WHERE state = 'open'`) == 0
	})
	f.WaitFor("cascade to settle", f.quiet())
	// A flow's own event is born dispatched; every other one here is an
	// edge's upstream and goes through exactly one daemon. A daemon counts
	// a dispatch once its transaction has committed, so the counters may
	// trail the outbox a moment: wait until they reach it, then require
	// them equal (one dispatched twice would pass it).
	events := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id IS NOT NULL`)
	var total, took float64
	f.WaitFor("the daemons' counters to reach the outbox's events", func() bool {
		total, took = 0, 0
		for _, d := range ds {
			total += counterValue(t, d.Metrics(), "ffd_events_dispatched_total")
			n, _ := d.Metrics().DispatchTakes()
			took += n
		}
		return int(total) >= events
	})
	if took < 1 || took > total {
		t.Fatalf("ffd_dispatch_takes_total{result=took} = %v across the daemons, want 1..%v (each took at least one event)", took, total)
	}
	if int(total) != events {
		t.Fatalf("the daemons dispatched %v events between them, the outbox has %d: something was dispatched twice or missed", total, events)
	}
	f.quiescent()
}

// A worker that stops heartbeating: its executions are retried after the
// TTL, or expired when out of attempts.
func TestLapsedLeasesRecovered(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon(daemon.Config{})
	lane := "lapse-" + uuid.NewString()[:8]
	for i := range 20 {
		attempts := 3
		if i%2 == 0 {
			attempts = 1
		}
		if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: lane, LeaseTTL: time.Second, MaxAttempts: attempts, Retry: ffd.RetryPolicy{Base: time.Millisecond}}); err != nil {
			t.Fatal(err)
		}
	}
	// A "worker" that claims and vanishes: no heartbeat, no completion.
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: lane, Worker: "vanished/1", Max: 20})
	if err != nil || len(xs) != 20 {
		t.Fatalf("claim: %d %v", len(xs), err)
	}
	start := time.Now()
	f.WaitFor("every lease to be taken back", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'running'`, lane) == 0
	})
	t.Logf("all 20 leases recovered %s after the claim (TTL 1s, sweep 200ms)", time.Since(start).Round(time.Millisecond))
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'expired'`, lane); n != 10 {
		t.Fatalf("%d expired, want the 10 with one attempt", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'pending' AND attempt = 1`, lane); n != 10 {
		t.Fatalf("%d pending for retry, want 10", n)
	}
	for _, x := range xs {
		if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err == nil {
			t.Fatal("the vanished worker completed after its lease was taken")
		}
	}
}

// SIGTERM (context cancel) mid-load: Run returns nil within the stop
// timeout and leaves nothing half-done.
func TestGracefulStopMidLoad(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.startDaemon(daemon.Config{StopTimeout: 5 * time.Second})
	lane := f.completeBurst(1000)
	go f.claimAndComplete(lane)
	f.WaitFor("some dispatching", func() bool {
		return f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NOT NULL`) > 50
	})
	start := time.Now()
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Run returned %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("daemon did not stop")
	}
	t.Logf("stopped in %s", time.Since(start).Round(time.Millisecond))
	// Nothing half-done: every dispatched event's edges resolved, and the
	// invariants hold with the daemon gone.
	if err := store.CheckInvariants(f.Ctx, f.DB.Pool); err != nil {
		t.Fatal(err)
	}
	// A new daemon finishes the rest.
	f.startDaemon(daemon.Config{})
	f.WaitFor("the rest dispatched", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'completed'`, lane) == 1000 && f.quiet()()
	})
	f.quiescent()
}

// systemd: READY=1 once ready, STOPPING=1 on stop; /readyz follows the
// database.
func TestSystemdAndReadiness(t *testing.T) {
	// Not parallel: it sets NOTIFY_SOCKET for the process.
	f := setup(t)
	dir, err := os.MkdirTemp("", "ffd-notify-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", sock)
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	// The test's database is taken away below, from another database.
	name := f.DB.Name
	admin, err := pgx.Connect(f.Ctx, strings.Replace(f.DB.URL, "/"+name+"?", "/postgres?", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	pool := f.pool(4)
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "gauge"}); err != nil {
		t.Fatal(err)
	}
	// A named consumer one event behind, for the consumer gauges.
	if err := store.InsertConsumer(f.Ctx, f.Pool, "audit", ffdtype.StreamCompletion, ffdtype.OutboxCursor{}); err != nil {
		t.Fatal(err)
	}
	done, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "gauge-done"})
	if err != nil {
		t.Fatal(err)
	}
	xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "gauge-done", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 || xs[0].ID.UUID != done.Execution.ID.UUID {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	d := f.startDaemon(daemon.Config{Pool: pool, AdminAddr: addr})
	expectMsg(t, msgs, "READY=1")
	get := func(path string) int {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get("/readyz"); code != 200 {
		t.Fatalf("/readyz = %d, want 200", code)
	}
	if code := get("/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	metrics := func() string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	// The executions gauge is sampled in the background: wait for it.
	// The gauges read from the database are sampled in the background,
	// one after the other: wait for the executions and the consumer's.
	f.WaitFor("the sampled gauges", func() bool {
		m := metrics()
		return strings.Contains(m, `ffd_executions{lane="gauge",state="pending"} 1`) &&
			strings.Contains(m, `ffd_lane_due_executions{lane="gauge"} 1`) &&
			strings.Contains(m, `ffd_lane_lag_seconds{lane="gauge"}`) &&
			strings.Contains(m, `ffd_outbox_consumer_behind_events{consumer="audit"} 1`)
	})
	body := metrics()
	for _, name := range []string{"ffd_events_dispatched_total", "ffd_dispatch_delay_seconds", "ffd_listener_reconnects_total",
		"ffd_daemon_ready 1", `ffd_outbox_consumer_behind_events{consumer="audit"} 1`, `ffd_outbox_consumer_lag_seconds{consumer="audit"}`} {
		if !strings.Contains(body, name) {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	// Take the database away: refuse new connections, end existing ones.
	away := func(allow bool) {
		if _, err := admin.Exec(f.Ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %v`, name, allow)); err != nil {
			t.Fatal(err)
		}
		if !allow {
			if _, err := admin.Exec(f.Ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
				t.Fatal(err)
			}
		}
	}
	away(false)
	f.WaitFor("/readyz to fail", func() bool { return get("/readyz") == http.StatusServiceUnavailable })
	if body := metrics(); !strings.Contains(body, "ffd_daemon_ready 0") {
		t.Errorf("/readyz fails but ffd_daemon_ready is not 0")
	}
	away(true)
	f.DB.Pool.Reset() // the test's own connections were ended too
	f.WaitFor("/readyz to recover", func() bool { return get("/readyz") == 200 })
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("stop: %v", err)
	}
	expectMsg(t, msgs, "STOPPING=1")
}

func expectMsg(t *testing.T, msgs <-chan string, want string) {
	t.Helper()
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-msgs:
			if strings.Contains(m, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no %s on the notify socket", want)
		}
	}
}

// Retention in the daemon deletes old events once no registered consumer
// needs them, and reports consumers idle while events wait.
func TestRetentionInDaemon(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.DB.Pool.Exec(f.Ctx, `INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, occurred_at)
		SELECT 1, gen_random_uuid(), 1, 1, 'w', 'acquired', now() - interval '2 hours' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.RegisterConsumer(f.Ctx, "holdback", ffd.StreamLease, ffd.FromStart); err != nil {
		t.Fatal(err)
	}
	if _, err := f.DB.Pool.Exec(f.Ctx, `UPDATE ff_outbox_consumer SET last_read_at = now() - interval '3 hours'`); err != nil {
		t.Fatal(err)
	}
	d := f.startDaemon(daemon.Config{Retention: time.Hour, RetentionInterval: 50 * time.Millisecond, ConsumerIdleLimit: time.Hour})
	f.WaitFor("the idle consumer to be reported", func() bool {
		return gaugeValue(t, d.Metrics(), "ffd_outbox_idle_consumers") == 1
	})
	if n := f.Count(`SELECT count(*) FROM ff_lease_event`); n != 5 {
		t.Fatalf("retention deleted events a consumer has not read: %d left", n)
	}
	if err := f.client.DropConsumer(f.Ctx, "holdback"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("retention to delete the old events", func() bool { return f.Count(`SELECT count(*) FROM ff_lease_event`) == 0 })
	f.WaitFor("the deletions to be counted", func() bool {
		return counterValue(t, d.Metrics(), "ffd_outbox_deleted_total") == 5
	})
}

// The daemon deletes finished flows past the execution retention, with
// their members, while live work goes on, and counts what it deleted.
func TestExecutionRetentionInDaemon(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.startDaemon(daemon.Config{ExecutionRetention: 30 * 24 * time.Hour, RetentionInterval: 50 * time.Millisecond})
	f.startWorker([]string{"ret"}, 4, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "ret"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "ret"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the flow to complete", func() bool {
		return f.Count(`SELECT count(*) FROM ff_flow WHERE flow_id = $1 AND state = 'completed'`, sub.Flow.ID) == 1
	})
	f.Exec(`UPDATE ff_flow SET terminal_at = now() - interval '40 days' WHERE flow_id = $1`, sub.Flow.ID)
	f.Exec(`UPDATE ff_execution SET terminal_at = now() - interval '40 days' WHERE flow_id = $1`, sub.Flow.ID)
	f.WaitFor("retention to delete the flow and its members", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1`, sub.Flow.ID) == 0 &&
			f.Count(`SELECT count(*) FROM ff_flow WHERE flow_id = $1`, sub.Flow.ID) == 0
	})
	f.WaitFor("the deletion to be counted", func() bool {
		return counterValue(t, d.Metrics(), "ffd_retention_deleted_total") == 1
	})
}

// Three daemons fire one schedule: every tick once. The ticks created are
// consecutive seconds, each created by exactly one daemon (their counters
// add up to the rows), and the schedule's own count agrees.
func TestScheduleFiresOnceAcrossDaemons(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ds []*daemon.Daemon
	for range 3 {
		ds = append(ds, f.startDaemon(daemon.Config{Pool: f.pool(4), ScheduleInterval: 50 * time.Millisecond}))
	}
	if _, err := f.client.CreateSchedule(f.Ctx, ffd.ScheduleParams{Name: "heartbeat", Cron: "@every 1s",
		Execution: &ffd.CreateParams{Lane: "beats", Kind: "beat"}}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("five ticks", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'beats'`) >= 5
	})
	if _, err := f.client.PauseSchedule(f.Ctx, "heartbeat"); err != nil {
		t.Fatal(err)
	}
	rows, err := f.Pool.Query(f.Ctx, `SELECT (tags->>'ffd_tick')::timestamptz FROM ff_execution WHERE lane = 'beats' ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	ticks, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(ticks); i++ {
		if d := ticks[i].Sub(ticks[i-1]); d != time.Second {
			t.Fatalf("ticks %s and %s are %s apart; want every second, once: %v", ticks[i-1], ticks[i], d, ticks)
		}
	}
	byDaemons := func() (n float64) {
		for _, d := range ds {
			n += counterValue(t, d.Metrics(), "ffd_schedule_ticks_total")
		}
		return n
	}
	// A daemon counts its ticks just after its transaction commits.
	f.WaitFor("the daemons' counts", func() bool { return int(byDaemons()) >= len(ticks) })
	s, err := f.client.GetSchedule(f.Ctx, "heartbeat")
	if err != nil {
		t.Fatal(err)
	}
	if n := byDaemons(); int(n) != len(ticks) || int(s.Fired) != len(ticks) {
		t.Fatalf("%d ticks created, the daemons counted %v, the schedule %d; want all equal", len(ticks), n, s.Fired)
	}
}
