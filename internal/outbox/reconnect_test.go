package outbox_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/testdb"
)

// terminate ends every backend of the database tagged with app.
func (f *fixture) terminate(app string) int {
	f.T.Helper()
	var n int
	if err := f.DB.Pool.QueryRow(f.Ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, app).Scan(&n); err != nil {
		f.T.Fatal(err)
	}
	return n
}

// Consume runs until its context ends: terminated backends (as in a
// server crash restart) are reconnected and it resumes from its cursor,
// delivering every event, in order, none skipped.
func TestConsumeSurvivesTerminatedBackends(t *testing.T) {
	t.Parallel()
	f := setup(t)
	cfg, err := pgxpool.ParseConfig(f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "consumer-under-fire"
	pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var mu sync.Mutex
	seen := map[int64]int{}
	ctx, cancel := context.WithCancel(f.Ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- outbox.Consume(ctx, outbox.ConsumeConfig{Pool: pool, Name: "under-fire", Stream: ffdtype.StreamCompletion, Batch: 7,
			PollInterval: 20 * time.Millisecond, Handler: func(_ context.Context, _ pgx.Tx, ev []ffdtype.OutboxEvent) error {
				mu.Lock()
				defer mu.Unlock()
				for _, e := range ev {
					seen[e.EventID]++
				}
				return nil
			}})
	}()
	var want []int64
	for round := range 10 {
		for range 20 {
			id, err := insertEvent(f.Ctx, f.DB.Pool)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		if round%2 == 0 {
			f.terminate("consumer-under-fire")
		}
		select {
		case err := <-done:
			t.Fatalf("Consume returned after its backends were terminated: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		mu.Lock()
		missing := 0
		for _, id := range want {
			if seen[id] == 0 {
				missing++
			}
		}
		mu.Unlock()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never delivered", missing, len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Consume after cancel: %v, want nil", err)
	}
}

// Permanent errors end Consume at once with the error: here the consumer
// is dropped under it; and a database that does not exist.
func TestConsumeStopsOnPermanentErrors(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx, cancel := context.WithTimeout(f.Ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- outbox.Consume(ctx, outbox.ConsumeConfig{Pool: f.DB.Pool, Name: "doomed", PollInterval: 20 * time.Millisecond,
			Handler: func(context.Context, pgx.Tx, []ffdtype.OutboxEvent) error { return nil }})
	}()
	for {
		if _, err := outbox.Get(f.Ctx, f.DB.Pool, "doomed"); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := outbox.Drop(f.Ctx, f.DB.Pool, "doomed"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("Consume of a dropped consumer: %v, want not found", err)
	}

	missing, err := pgxpool.New(f.Ctx, replaceDB(t, f.DB, "no_such_database"))
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	err = outbox.Consume(ctx, outbox.ConsumeConfig{Pool: missing, Name: "c", Handler: func(context.Context, pgx.Tx, []ffdtype.OutboxEvent) error { return nil }})
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "no_such_database") {
		t.Fatalf("Consume on a missing database: %v (context %v), want the server's refusal at once", err, ctx.Err())
	}
	if outbox.Transient(err) {
		t.Fatalf("a missing database classed as transient: %v", err)
	}
}

// replaceDB is db's URL naming another database.
func replaceDB(t *testing.T, db *testdb.DB, name string) string {
	t.Helper()
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}
