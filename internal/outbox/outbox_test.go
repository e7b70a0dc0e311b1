package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// Outbox tests write bare events no engine path would write, so they do
// not check the invariants.
type fixture struct{ *testdb.Fixture }

func setup(t *testing.T) *fixture { return &fixture{testdb.Setup(t, 3*time.Minute)} }

// insertEvent writes one completion event in q and returns its id.
func insertEvent(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome)
		VALUES (1, gen_random_uuid(), 'success') RETURNING event_id`).Scan(&id)
	return id, err
}

func (f *fixture) read(s ffdtype.OutboxStream, after ffdtype.OutboxCursor) []ffdtype.OutboxEvent {
	f.T.Helper()
	ev, err := outbox.Read(f.Ctx, f.DB.Pool, s, after, 1000)
	if err != nil {
		f.T.Fatal(err)
	}
	return ev
}

// readUntil reads from after until n events are visible (other tests'
// transactions can hold the cluster-wide horizon back briefly).
func (f *fixture) readUntil(s ffdtype.OutboxStream, after ffdtype.OutboxCursor, n int) []ffdtype.OutboxEvent {
	f.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := f.read(s, after)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// consumeN runs ConsumeOnce (batches of batch) until n events went
// through h or the wait runs out.
func (f *fixture) consumeN(name string, batch, n int, h ffdtype.OutboxHandler) int {
	f.T.Helper()
	total := 0
	deadline := time.Now().Add(30 * time.Second)
	for total < n && time.Now().Before(deadline) {
		k, err := outbox.ConsumeOnce(f.Ctx, f.DB.Pool, name, min(batch, n-total), h)
		if err != nil {
			f.T.Fatal(err)
		}
		total += k
		if k == 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return total
}

func ids(ev []ffdtype.OutboxEvent) []int64 {
	out := make([]int64, len(ev))
	for i, e := range ev {
		out[i] = e.EventID
	}
	return out
}

// A opens and writes first, B writes later and commits first: the reader
// sees neither until A ends, then both in (txid, event_id) order; had A
// rolled back, B's alone.
func TestOutOfOrderCommits(t *testing.T) {
	t.Parallel()
	for _, commitA := range []bool{true, false} {
		t.Run(fmt.Sprintf("A commits=%v", commitA), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			txA, err := f.DB.Pool.Begin(f.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer txA.Rollback(f.Ctx)
			idA, err := insertEvent(f.Ctx, txA)
			if err != nil {
				t.Fatal(err)
			}
			idB, err := insertEvent(f.Ctx, f.DB.Pool) // B: its own transaction, committed
			if err != nil {
				t.Fatal(err)
			}
			if got := f.read(ffdtype.StreamCompletion, ffdtype.OutboxCursor{}); len(got) != 0 {
				t.Fatalf("while A is open the reader got %v; want nothing (B must wait behind A)", ids(got))
			}
			if commitA {
				if err := txA.Commit(f.Ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := txA.Rollback(f.Ctx); err != nil {
				t.Fatal(err)
			}
			want := []int64{idB}
			if commitA {
				want = []int64{idA, idB}
			}
			// The horizon is cluster-wide: a transaction open in another
			// test's database also holds events back, for a moment.
			got := f.readUntil(ffdtype.StreamCompletion, ffdtype.OutboxCursor{}, len(want))
			if fmt.Sprint(ids(got)) != fmt.Sprint(want) {
				t.Fatalf("after A ended: got %v, want %v", ids(got), want)
			}
			// Exactly once: reading after the last position yields nothing.
			if more := f.read(ffdtype.StreamCompletion, got[len(got)-1].Position()); len(more) != 0 {
				t.Fatalf("re-read after the cursor returned %v", ids(more))
			}
		})
	}
}

// 16 writers commit in random order with random delays; 3 named consumers
// each see every event exactly once, in (txid, event_id) order.
func TestStressConsumers(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg, _ := pgxpool.ParseConfig(f.DB.URL)
	cfg.MaxConns = 30
	pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	const writers, perWriter = 16, 40
	names := []string{"billing", "audit", "dash"}
	for _, n := range names {
		if _, err := outbox.Register(f.Ctx, pool, n, ffdtype.StreamAll, ffdtype.FromStart); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	written := map[int64]bool{}
	seen := map[string][]ffdtype.OutboxEvent{}
	var wg sync.WaitGroup
	done := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWriter {
				tx, err := pool.Begin(f.Ctx)
				if err != nil {
					t.Error(err)
					return
				}
				var mine []int64
				for range 1 + rng.IntN(3) {
					id, err := insertEvent(f.Ctx, tx)
					if err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, id)
				}
				// Some writers also write lease events, for the merged stream.
				if rng.IntN(2) == 0 {
					var id int64
					if err := tx.QueryRow(f.Ctx, `INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
						VALUES (2, gen_random_uuid(), 1, 1, 'w', 'acquired') RETURNING event_id`).Scan(&id); err != nil {
						t.Error(err)
						return
					}
					mine = append(mine, id)
				}
				time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
				if rng.IntN(10) == 0 {
					tx.Rollback(f.Ctx) // never delivered
					continue
				}
				if err := tx.Commit(f.Ctx); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, id := range mine {
					written[id] = true
				}
				mu.Unlock()
			}
		}()
	}
	var cw sync.WaitGroup
	for _, name := range names {
		cw.Add(1)
		go func() {
			defer cw.Done()
			for {
				n, err := outbox.ConsumeOnce(f.Ctx, pool, name, 1+rand.IntN(50), func(ctx context.Context, tx pgx.Tx, ev []ffdtype.OutboxEvent) error {
					mu.Lock()
					seen[name] = append(seen[name], ev...)
					mu.Unlock()
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					select {
					case <-done:
						return
					case <-time.After(2 * time.Millisecond):
					}
				}
			}
		}()
	}
	wg.Wait()
	// Let the consumers drain, then stop them.
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		caught := true
		for _, n := range names {
			caught = caught && len(seen[n]) >= len(written)
		}
		mu.Unlock()
		if caught || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(done)
	cw.Wait()
	for _, n := range names {
		got := seen[n]
		if len(got) != len(written) {
			t.Fatalf("consumer %s saw %d events, %d were committed", n, len(got), len(written))
		}
		once := map[int64]bool{}
		for i, e := range got {
			if once[e.EventID] || !written[e.EventID] {
				t.Fatalf("consumer %s: event %d repeated or never committed", n, e.EventID)
			}
			once[e.EventID] = true
			if i > 0 && !got[i-1].Position().Less(e.Position()) {
				t.Fatalf("consumer %s: %v then %v: not in (txid, event_id) order", n, got[i-1].Position(), e.Position())
			}
		}
	}
	t.Logf("%d events, %d writers, %d consumers", len(written), writers, len(names))
}

// A consumer restarted resumes right after its cursor; a handler that
// fails rolls back its own writes and the ack, and gets the batch again.
func TestRestartAndTransactionalAck(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.DB.Pool.Exec(f.Ctx, `CREATE TABLE ledger (event_id bigint PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	var all []int64
	for range 10 {
		id, err := insertEvent(f.Ctx, f.DB.Pool)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	if _, err := outbox.Register(f.Ctx, f.DB.Pool, "ledger", ffdtype.StreamCompletion, ffdtype.FromStart); err != nil {
		t.Fatal(err)
	}
	write := func(ctx context.Context, tx pgx.Tx, ev []ffdtype.OutboxEvent) error {
		for _, e := range ev {
			if _, err := tx.Exec(ctx, `INSERT INTO ledger VALUES ($1)`, e.EventID); err != nil {
				return err
			}
		}
		return nil
	}
	if n := f.consumeN("ledger", 4, 4, write); n != 4 {
		t.Fatalf("first batch: %d", n)
	}
	// The handler fails mid-batch: its writes and the ack roll back.
	boom := errors.New("downstream unavailable")
	if _, err := outbox.ConsumeOnce(f.Ctx, f.DB.Pool, "ledger", 4, func(ctx context.Context, tx pgx.Tx, ev []ffdtype.OutboxEvent) error {
		// Fewer than 4 when the horizon holds some back.
		if err := write(ctx, tx, ev[:min(2, len(ev))]); err != nil {
			return err
		}
		return boom
	}); !errors.Is(err, boom) {
		t.Fatalf("failing handler: %v", err)
	}
	var n int
	f.DB.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM ledger`).Scan(&n)
	if n != 4 {
		t.Fatalf("ledger has %d rows after a failed batch, want 4", n)
	}
	// "Restart": a fresh call resumes right after the cursor. An empty
	// read is not the end: the cursor holds back events newer than the
	// oldest transaction open anywhere on the server (another test's, on
	// the shared cluster), so read until the cursor reaches the last event.
	for deadline := time.Now().Add(30 * time.Second); ; {
		k, err := outbox.ConsumeOnce(f.Ctx, f.DB.Pool, "ledger", 3, write)
		if err != nil {
			t.Fatal(err)
		}
		if c, err := outbox.Get(f.Ctx, f.DB.Pool, "ledger"); err != nil {
			t.Fatal(err)
		} else if c.Cursor.EventID == all[len(all)-1] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer did not reach the last event in 30 s")
		}
		if k == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if k, err := outbox.ConsumeOnce(f.Ctx, f.DB.Pool, "ledger", 3, write); err != nil || k != 0 {
		t.Fatalf("a read past the last event handed %d events (%v), want none", k, err)
	}
	rows, _ := f.DB.Pool.Query(f.Ctx, `SELECT event_id FROM ledger ORDER BY event_id`)
	got, _ := pgx.CollectRows(rows, pgx.RowTo[int64])
	if fmt.Sprint(got) != fmt.Sprint(all) {
		t.Fatalf("ledger %v, want %v: each event exactly once", got, all)
	}
	c, err := outbox.Get(f.Ctx, f.DB.Pool, "ledger")
	if err != nil || c.Cursor.EventID != all[len(all)-1] {
		t.Fatalf("cursor %+v %v", c, err)
	}
	// Registering again keeps the cursor; another stream is a conflict.
	again, err := outbox.Register(f.Ctx, f.DB.Pool, "ledger", ffdtype.StreamCompletion, ffdtype.FromStart)
	if err != nil || again.Cursor != c.Cursor {
		t.Fatalf("re-register moved the cursor: %+v %v", again, err)
	}
	if _, err := outbox.Register(f.Ctx, f.DB.Pool, "ledger", ffdtype.StreamLease, ffdtype.FromStart); err == nil {
		t.Fatal("re-register for another stream succeeded")
	}
}

// From-now skips every event committed below the horizon at registration
// and delivers every one committed after.
func TestFromNow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := insertEvent(f.Ctx, f.DB.Pool); err != nil {
		t.Fatal(err)
	}
	// Wait until the old event is below the (cluster-wide) horizon.
	if got := f.readUntil(ffdtype.StreamCompletion, ffdtype.OutboxCursor{}, 1); len(got) != 1 {
		t.Fatal("the first event never became readable")
	}
	if _, err := outbox.Register(f.Ctx, f.DB.Pool, "late", ffdtype.StreamAll, ffdtype.FromNow); err != nil {
		t.Fatal(err)
	}
	id, err := insertEvent(f.Ctx, f.DB.Pool)
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	f.consumeN("late", 10, 1, func(_ context.Context, _ pgx.Tx, ev []ffdtype.OutboxEvent) error {
		got = append(got, ids(ev)...)
		return nil
	})
	if fmt.Sprint(got) != fmt.Sprint([]int64{id}) {
		t.Fatalf("from-now consumer got %v, want only %d", got, id)
	}
}

// Retention deletes only dispatched events older than the window that
// every registered consumer has passed.
func TestRetention(t *testing.T) {
	t.Parallel()
	f := setup(t)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := f.DB.Pool.Exec(f.Ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	for range 6 {
		if _, err := insertEvent(f.Ctx, f.DB.Pool); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
		SELECT 1, gen_random_uuid(), 1, 1, 'w', 'acquired' FROM generate_series(1, 4)`)
	// Everything is old; half the completion events are dispatched.
	exec(`UPDATE ff_completion_event SET occurred_at = now() - interval '30 days'`)
	exec(`UPDATE ff_lease_event SET occurred_at = now() - interval '30 days'`)
	exec(`UPDATE ff_completion_event SET dispatched_at = now() WHERE event_id IN (SELECT event_id FROM ff_completion_event ORDER BY event_id LIMIT 4)`)
	// A consumer that has read two completion events.
	if _, err := outbox.Register(f.Ctx, f.DB.Pool, "slow", ffdtype.StreamCompletion, ffdtype.FromStart); err != nil {
		t.Fatal(err)
	}
	if n := f.consumeN("slow", 2, 2, func(context.Context, pgx.Tx, []ffdtype.OutboxEvent) error { return nil }); n != 2 {
		t.Fatalf("consumer read %d, want 2", n)
	}
	r, err := outbox.Retain(f.Ctx, f.DB.Pool, 7*24*time.Hour, 1)
	if err != nil {
		t.Fatal(err)
	}
	// Completion: 4 dispatched, 2 of those consumed → 2 deleted. Lease: no
	// consumer of that stream → all 4.
	if r.Completion != 2 || r.Lease != 4 {
		t.Fatalf("retention deleted %+v, want 2 completion and 4 lease events", r)
	}
	var undispatched, unconsumed int
	f.DB.Pool.QueryRow(f.Ctx, `SELECT count(*) FILTER (WHERE dispatched_at IS NULL), count(*) FILTER (WHERE dispatched_at IS NOT NULL) FROM ff_completion_event`).Scan(&undispatched, &unconsumed)
	if undispatched != 2 || unconsumed != 2 {
		t.Fatalf("left %d undispatched and %d dispatched-but-unconsumed, want 2 and 2", undispatched, unconsumed)
	}
	// Recent events are kept whatever else holds.
	if r, _ := outbox.Retain(f.Ctx, f.DB.Pool, 365*24*time.Hour*100, 10); r.Completion+r.Lease != 0 {
		t.Fatalf("a window longer than the events' age deleted %+v", r)
	}
	// An idle consumer behind waiting events is reported.
	exec(`UPDATE ff_outbox_consumer SET last_read_at = now() - interval '2 days'`)
	idle, err := store.IdleConsumers(f.Ctx, f.DB.Pool, 24*time.Hour)
	if err != nil || len(idle) != 1 || idle[0].Name != "slow" {
		t.Fatalf("idle consumers %+v %v", idle, err)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := outbox.Read(f.Ctx, f.DB.Pool, "everything", ffdtype.OutboxCursor{}, 10); err == nil {
		t.Error("unknown stream accepted")
	}
	if _, err := outbox.Read(f.Ctx, f.DB.Pool, ffdtype.StreamAll, ffdtype.OutboxCursor{}, 0); err == nil {
		t.Error("limit 0 accepted")
	}
	if _, err := outbox.Register(f.Ctx, f.DB.Pool, "bad name", ffdtype.StreamAll, ffdtype.FromStart); err == nil {
		t.Error("bad consumer name accepted")
	}
	if err := outbox.StreamWAL(f.Ctx, ffdtype.WALConfig{ConnString: f.DB.URL, Slot: "Bad-Slot", Handler: func(context.Context, []ffdtype.OutboxEvent) error { return nil }}); err == nil || !strings.Contains(err.Error(), "Bad-Slot") {
		t.Errorf("bad slot name: %v", err)
	}
}

// An event born dispatched (a solo execution's, a flow's own) sends an
// empty ff_completion, and a following consumer still wakes for it: with a poll
// interval of an hour, only the notification can bring it in. Not
// parallel: another test's open transaction holds back the cluster-wide
// horizon the cursor reads under, and the woken consumer would find
// nothing visible yet and wait for the next poll.
func TestConsumerWakesOnBornDispatchedEvents(t *testing.T) {
	f := setup(t)
	got := make(chan int64, 100)
	ctx, cancel := context.WithCancel(f.Ctx)
	done := make(chan error, 1)
	go func() {
		done <- outbox.Consume(ctx, outbox.ConsumeConfig{Pool: f.DB.Pool, Name: "wake", Stream: ffdtype.StreamCompletion, PollInterval: time.Hour,
			Handler: func(_ context.Context, _ pgx.Tx, ev []ffdtype.OutboxEvent) error {
				for _, e := range ev {
					got <- e.EventID
				}
				return nil
			}})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Consume: %v", err)
		}
	}()
	bornDispatched := func() int64 {
		t.Helper()
		if _, _, err := leases.Create(f.Ctx, f.DB.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "wake"}); err != nil {
			t.Fatal(err)
		}
		xs, err := leases.Claim(f.Ctx, f.DB.Pool, ffdtype.ClaimParams{Lane: "wake", Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim: %d claimed, %v", len(xs), err)
		}
		ends, errs, err := leases.CompleteMany(f.Ctx, f.DB.Pool, leases.Limits{}, []leases.Completion{{ID: xs[0].ID, Epoch: xs[0].LeaseEpoch, Solo: true}}, 0)
		if err == nil {
			err = errs[0]
		}
		if err != nil {
			t.Fatal(err)
		}
		return ends[0].EventID
	}
	receive := func(want int64) {
		t.Helper()
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("consumed event %d, want %d", id, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d not consumed within 10s of its commit: no wake-up", want)
		}
	}
	// The first is read by the consumer's first pass; wait for its LISTEN
	// before the second, which only a wake-up can bring in.
	receive(bornDispatched())
	for deadline := time.Now().Add(30 * time.Second); ; {
		var n int
		if err := f.DB.Pool.QueryRow(f.Ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query ILIKE 'listen%'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the consumer never listened")
		}
		time.Sleep(10 * time.Millisecond)
	}
	receive(bornDispatched())
}
