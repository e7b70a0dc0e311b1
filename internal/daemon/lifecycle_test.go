package daemon_test

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	proxy := testdb.NewProxy(t, f.db)
	proxy.Freeze()
	listen, err := pgx.ParseConfig(proxy.URL(f.db))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	d, err := daemon.New(daemon.Config{Pool: f.pool(4), ListenConnConfig: listen, AdminAddr: addr, Notifier: daemon.NopNotifier{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.ctx)
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
