package listener_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// probe records what a listener under test delivers.
type probe struct {
	t        *testing.T
	db       *testdb.DB
	got      chan listener.Notification
	connects chan bool
	ctx      context.Context
}

func setup(t *testing.T) (*probe, *listener.Listener) {
	t.Helper()
	f := &probe{t: t, db: testdb.New(t), got: make(chan listener.Notification, 16), connects: make(chan bool, 16), ctx: context.Background()}
	n, err := listener.New(listener.Config{
		ConnConfig:      f.db.Pool.Config().ConnConfig,
		ApplicationName: "listener-test",
		Topics:          []listener.Topic{listener.Ready, listener.Revoke},
		Handle:          func(n listener.Notification) { f.got <- n },
		OnConnect:       func(_ context.Context, reconnect bool) { f.connects <- reconnect },
		MinBackoff:      10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f, n
}

func (f *probe) connected(wantReconnect bool) {
	f.t.Helper()
	select {
	case r := <-f.connects:
		if r != wantReconnect {
			f.t.Fatalf("OnConnect(reconnect=%v), want %v", r, wantReconnect)
		}
	case <-time.After(time.Minute):
		f.t.Fatal("the listener never connected")
	}
}

func (f *probe) expect(topic listener.Topic, payload string) {
	f.t.Helper()
	if _, err := f.db.Pool.Exec(f.ctx, `SELECT pg_notify($1, $2)`, string(topic), payload); err != nil {
		f.t.Fatal(err)
	}
	select {
	case n := <-f.got:
		if n.Topic != topic || n.Payload != payload {
			f.t.Fatalf("got %s %q, want %s %q", n.Topic, n.Payload, topic, payload)
		}
	case <-time.After(time.Minute):
		f.t.Fatalf("no notification on %s", topic)
	}
}

func (f *probe) backends() []int32 {
	f.t.Helper()
	pids, err := store.Backends(f.ctx, f.db.Pool, "listener-test")
	if err != nil {
		f.t.Fatal(err)
	}
	return pids
}

// A listener delivers typed notifications of its topics only, comes back
// after its backend is terminated (saying it is a reconnect, so its owner
// sweeps), and after Stop holds no connection.
func TestListenerDeliversReconnectsAndStops(t *testing.T) {
	t.Parallel()
	f, n := setup(t)
	n.Start(f.ctx)
	f.connected(false)
	f.expect(listener.Ready, "lane-a")
	if _, err := f.db.Pool.Exec(f.ctx, `SELECT pg_notify('ff_completion', '1')`); err != nil {
		t.Fatal(err)
	}
	f.expect(listener.Revoke, "3:x:1") // and not the completion before it

	pids := f.backends()
	if len(pids) != 1 {
		t.Fatalf("%d listener backends, want 1", len(pids))
	}
	if _, err := store.TerminateBackends(f.ctx, f.db.Pool, pids); err != nil {
		t.Fatal(err)
	}
	f.connected(true)
	if n.Reconnects() != 1 || !n.Connected() {
		t.Fatalf("after a terminated backend: %d reconnects, connected %v; want 1, true", n.Reconnects(), n.Connected())
	}
	f.expect(listener.Ready, "lane-b")

	n.Stop(context.Background())
	if n.Connected() {
		t.Fatal("connected after Stop")
	}
	deadline := time.Now().Add(time.Minute)
	for len(f.backends()) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the listener's connection outlived Stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	n.Stop(context.Background()) // a second Stop is a no-op
}

// Stop while the database is unreachable returns promptly: the loop waits
// in its backoff, not in a connect that outlives it.
func TestListenerStopsWhileReconnecting(t *testing.T) {
	t.Parallel()
	f, _ := setup(t)
	cfg := f.db.Pool.Config().ConnConfig.Copy()
	cfg.Port = 1 // nothing listens there
	var disconnects atomic.Int64
	n, err := listener.New(listener.Config{ConnConfig: cfg, Topics: []listener.Topic{listener.Ready},
		Handle: func(listener.Notification) {}, OnDisconnect: func(error) { disconnects.Add(1) }, MinBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	n.Start(f.ctx)
	for disconnects.Load() < 2 {
		time.Sleep(5 * time.Millisecond)
	}
	stopped := make(chan struct{})
	go func() { n.Stop(context.Background()); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return while the listener was reconnecting")
	}
}
