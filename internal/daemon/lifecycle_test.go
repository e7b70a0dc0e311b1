package daemon_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/testdb"
)

// freeAddr is a loopback address nothing listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A daemon that returns before it ever became ready (its LISTEN
// connection hangs on a database that never answers) serves nothing
// afterwards: /healthz answered while it ran, and is refused once Run has
// returned.
func TestStoppedDaemonServesNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	proxy := testdb.NewProxy(t, f.DB)
	proxy.Freeze()
	listen, err := pgx.ParseConfig(proxy.URL(f.DB))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	d, err := daemon.New(daemon.Config{Pool: f.pool(4), ListenConnConfig: listen, AdminAddr: addr, Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	healthz := func() error {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); healthz() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("/healthz never answered while the daemon ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.Ready() {
		t.Fatal("the daemon is ready although its listener cannot connect")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if err := healthz(); err == nil {
		t.Fatal("/healthz still answers after Run returned")
	}
	proxy.Thaw()
}

// A daemon started while its database hangs (a restart in progress, a
// partition) waits for it instead of exiting, and comes up ready once the
// database answers.
func TestDaemonWaitsForItsDatabaseAtStartUp(t *testing.T) {
	t.Parallel()
	f := setup(t)
	proxy, pool := f.hungPool()
	d, err := daemon.New(daemon.Config{Pool: pool, Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	// Several connect timeouts: it must still be waiting, not gone.
	select {
	case err := <-done:
		t.Fatalf("Run returned while the database hung: %v", err)
	case <-time.After(time.Second):
	}
	proxy.Thaw()
	for deadline := time.Now().Add(30 * time.Second); !d.Ready(); {
		select {
		case err := <-done:
			t.Fatalf("Run returned after the database came back: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon did not become ready after its database came back")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A permanent error at start-up (here a role that does not exist) is
// returned at once rather than waited out.
func TestDaemonStartUpRefusesPermanentErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := daemon.New(daemon.Config{Pool: f.refusedPool(), Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(f.Ctx) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no_such_role") {
			t.Fatalf("Run: %v, want the server's refusal of no_such_role", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run kept waiting on a role that does not exist")
	}
}

// Start runs the daemon in the background and returns once it is ready;
// a second Start is refused; Stop returns Run's result, leaves the daemon
// not ready, and is a no-op the second time. Start returns the start-up
// error of a daemon that cannot start, and ctx's error (having stopped
// the daemon) when ctx ends first.
func TestStartAndStop(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := daemon.New(daemon.Config{Pool: f.pool(4), SweepInterval: 200 * time.Millisecond, Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	if !d.Ready() {
		t.Fatal("Start returned before the daemon was ready")
	}
	if err := d.Start(f.Ctx); !errors.Is(err, daemon.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v, want nil", err)
	}
	if d.Ready() {
		t.Fatal("ready after Stop")
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("second Stop: %v, want a no-op", err)
	}

	bad, err := daemon.New(daemon.Config{Pool: f.refusedPool(), Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := bad.Start(f.Ctx); err == nil || !strings.Contains(err.Error(), "no_such_role") {
		t.Fatalf("Start: %v, want the server's refusal of no_such_role", err)
	}

	proxy, hung := f.hungPool()
	waiting, err := daemon.New(daemon.Config{Pool: hung, Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(f.Ctx, time.Second)
	defer cancel()
	if err := waiting.Start(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start against a hung database: %v, want the context's deadline", err)
	}
	// Once its database answers, the same daemon starts.
	proxy.Thaw()
	if err := waiting.Start(f.Ctx); err != nil {
		t.Fatalf("Start after an abandoned Start: %v", err)
	}
	if err := waiting.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// hungPool is a pool to the test's database through a frozen proxy: a
// server that accepts connections and never answers, until Thaw.
func (f *fixture) hungPool() (*testdb.Proxy, *pgxpool.Pool) {
	f.T.Helper()
	proxy := testdb.NewProxy(f.T, f.DB)
	proxy.Freeze()
	cfg, err := pgxpool.ParseConfig(proxy.URL(f.DB))
	if err != nil {
		f.T.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 200 * time.Millisecond
	pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(pool.Close)
	return proxy, pool
}

// refusedPool is a pool whose every connection the server refuses for
// good: its role does not exist.
func (f *fixture) refusedPool() *pgxpool.Pool {
	f.T.Helper()
	u, err := url.Parse(f.DB.URL)
	if err != nil {
		f.T.Fatal(err)
	}
	u.User = url.User("no_such_role")
	pool, err := pgxpool.New(f.Ctx, u.String())
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(pool.Close)
	return pool
}

// A database that answers pings but refuses one of the sweep's steps (a
// table the daemon cannot reach; on a read-only replica, every step) does
// not leave the daemon looking healthy: after three failed sweeps in a
// row /readyz answers 503 naming the step, ffd_sweep_failing_steps is 1,
// and both recover with the step.
func TestFailingSweepStepIsNotReady(t *testing.T) {
	t.Parallel()
	f := setup(t)
	addr := freeAddr(t)
	m := daemon.NewMetrics()
	d, err := daemon.New(daemon.Config{Pool: f.pool(4), AdminAddr: addr, SweepInterval: 50 * time.Millisecond, Metrics: m, Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background())
	readyz := func() (int, string) {
		c := http.Client{Timeout: time.Second}
		resp, err := c.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); !ok(); {
			if time.Now().After(deadline) {
				code, body := readyz()
				t.Fatalf("%s: not after 30 s (readyz %d %q)", what, code, body)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if code, _ := readyz(); code != http.StatusOK {
		t.Fatalf("readyz %d once started, want 200", code)
	}
	// The sweep's dispatch step reads ff_completion_event: take it away.
	if _, err := f.Pool.Exec(f.Ctx, `ALTER TABLE ff_completion_event RENAME TO ff_completion_event_away`); err != nil {
		t.Fatal(err)
	}
	waitFor("a failing dispatch step makes the daemon not ready", func() bool { return !d.Ready() })
	code, body := readyz()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "dispatch") {
		t.Errorf("readyz with the dispatch step failing: %d %q; want 503 naming dispatch", code, body)
	}
	if got := gaugeValue(t, m, "ffd_sweep_failing_steps"); got != 1 {
		t.Errorf("ffd_sweep_failing_steps = %v, want 1", got)
	}
	if got := labelValue(t, m, "ffd_sweep_errors_total", "step", "dispatch"); got < 3 {
		t.Errorf("ffd_sweep_errors_total{step=dispatch} = %v, want at least 3", got)
	}
	if _, err := f.Pool.Exec(f.Ctx, `ALTER TABLE ff_completion_event_away RENAME TO ff_completion_event`); err != nil {
		t.Fatal(err)
	}
	waitFor("the daemon is ready again once the step succeeds", d.Ready)
	if got := gaugeValue(t, m, "ffd_sweep_failing_steps"); got != 0 {
		t.Errorf("ffd_sweep_failing_steps = %v after recovery, want 0", got)
	}
}
