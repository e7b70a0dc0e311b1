package outbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
)

type walRun struct {
	mu      sync.Mutex
	txs     [][]int64
	done    chan error
	stop    context.CancelFunc
	started chan struct{}
}

func (w *walRun) all() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	for _, tx := range w.txs {
		out = append(out, tx...)
	}
	return out
}

func (f *fixture) slot() string {
	slot := "s_" + strings.ToLower(f.DB.Name)
	f.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := outbox.DropSlot(ctx, f.DB.URL, slot); err != nil && !strings.Contains(err.Error(), "does not exist") {
			f.T.Errorf("drop slot: %v", err)
		}
	})
	return slot
}

func (f *fixture) stream(slot string, into *walRun) *walRun {
	if into == nil {
		into = &walRun{}
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	into.stop, into.done, into.started = cancel, make(chan error, 1), make(chan struct{})
	started := into.started
	go func() {
		into.done <- outbox.StreamWAL(ctx, ffdtype.WALConfig{ConnString: f.DB.URL, Slot: slot, StatusInterval: 100 * time.Millisecond,
			OnStart: func() { close(started) },
			Handler: func(_ context.Context, ev []ffdtype.OutboxEvent) error {
				into.mu.Lock()
				defer into.mu.Unlock()
				into.txs = append(into.txs, ids(ev))
				return nil
			}})
	}()
	return into
}

// waitStarted waits until the stream is streaming (a slot being created is
// already "active" while it waits for a consistent point, before which
// nothing is decoded) and returns its walsender's pid.
func (f *fixture) waitStarted(run *walRun, slot string) int {
	f.T.Helper()
	select {
	case <-run.started:
	case err := <-run.done:
		f.T.Fatalf("the stream ended before starting: %v", err)
	case <-time.After(2 * time.Minute):
		f.T.Fatal("the stream never started")
	}
	return f.waitSlotActive(slot)
}

func (f *fixture) waitSlotActive(slot string) int {
	f.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var pid *int
		err := f.DB.Pool.QueryRow(f.Ctx, `SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&pid)
		if err == nil && pid != nil {
			return *pid
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("slot %s never became active", slot)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The WAL stream delivers transactions in commit order (B before A when B
// commits first), whatever their event ids.
func TestWALCommitOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	slot := f.slot()
	run := f.stream(slot, nil)
	defer run.stop()
	f.waitStarted(run, slot)
	txA, err := f.DB.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	idA, err := insertEvent(f.Ctx, txA)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := insertEvent(f.Ctx, f.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	if err := txA.Commit(f.Ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(run.all()) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := run.all(); len(got) != 2 || got[0] != idB || got[1] != idA {
		t.Fatalf("WAL order %v, want B (%d) then A (%d): commit order", got, idB, idA)
	}
}

// Killing the replication connection and restarting the consumer loses
// nothing; anything delivered twice carries the same ids.
func TestWALResumeAfterKill(t *testing.T) {
	t.Parallel()
	f := setup(t)
	slot := f.slot()
	run := f.stream(slot, nil)
	pid := f.waitStarted(run, slot)
	var want []int64
	write := func(n int) {
		for range n {
			tx, err := f.DB.Pool.Begin(f.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				id, err := insertEvent(f.Ctx, tx)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, id)
			}
			if err := tx.Commit(f.Ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(30)
	if _, err := f.DB.Pool.Exec(f.Ctx, `SELECT pg_terminate_backend($1)`, pid); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-run.done:
		if err == nil {
			t.Fatal("the stream ended without an error when its connection was killed")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not notice its connection was killed")
	}
	write(30) // committed while nobody streams
	f.waitSlotInactive(slot)
	run = f.stream(slot, run)
	defer run.stop()
	f.waitStarted(run, slot)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if covered(run.all(), want) {
			break
		}
		select {
		case err := <-run.done:
			t.Fatalf("the restarted stream ended: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
	}
	got := run.all()
	if !covered(got, want) {
		seen := map[int64]bool{}
		for _, id := range got {
			seen[id] = true
		}
		var missing []int
		for i, id := range want {
			if !seen[id] {
				missing = append(missing, i)
			}
		}
		var slotInfo string
		f.DB.Pool.QueryRow(f.Ctx, `SELECT active::text || ' ' || restart_lsn::text || ' ' || confirmed_flush_lsn::text || ' ' || pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&slotInfo)
		t.Fatalf("lost events: got %d ids for %d written; missing positions %v (of 90 before the kill, 90 after); slot %s; delivered txs %d", len(got), len(want), missing, slotInfo, len(run.txs))
	}
	for _, id := range got {
		if !contains(want, id) {
			t.Fatalf("delivered id %d that was never written", id)
		}
	}
	t.Logf("%d events written, %d delivered (%d redelivered)", len(want), len(got), len(got)-len(want))
}

func (f *fixture) waitSlotInactive(slot string) {
	f.T.Helper()
	start := time.Now()
	defer func() { f.T.Logf("slot released %s after the stream ended", time.Since(start).Round(time.Millisecond)) }()
	// A terminated walsender releases its slot when it exits, which on a
	// loaded machine can take a while.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var active bool
		if err := f.DB.Pool.QueryRow(f.Ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err == nil && !active {
			return
		}
		if time.Now().After(deadline) {
			f.T.Fatalf("slot %s still active", slot)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func covered(got, want []int64) bool {
	seen := map[int64]bool{}
	for _, id := range got {
		seen[id] = true
	}
	for _, id := range want {
		if !seen[id] {
			return false
		}
	}
	return true
}

func contains(xs []int64, x int64) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// On a server without wal_level=logical the stream refuses with an error
// naming the setting.
func TestWALLevelRequired(t *testing.T) {
	t.Parallel()
	if os.Getenv("FFD_TEST_DATABASE_URL") != "" {
		t.Skip("starts a private server with wal_level=replica")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "ffd-wal-level-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), Settings: map[string]string{"wal_level": "replica"}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	pool, err := pgxpool.New(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := schema.Up(ctx, pool, 0); err != nil {
		t.Fatal(err)
	}
	err = outbox.StreamWAL(ctx, ffdtype.WALConfig{ConnString: srv.URL("postgres"), Slot: "never",
		Handler: func(context.Context, []ffdtype.OutboxEvent) error { return nil }})
	if !errors.Is(err, outbox.ErrWALLevel) || !strings.Contains(err.Error(), "wal_level = logical") {
		t.Fatalf("StreamWAL on wal_level=replica: %v; want an error naming wal_level = logical", err)
	}
}
