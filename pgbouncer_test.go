package ffd_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Five workers of 100 slots each (500) and their clients run through a
// PgBouncer in transaction pooling with 20 server connections: three
// listen on direct connections, two poll only; solo executions and flows
// all finish, and every invariant holds. The daemon keeps its direct
// connection.
func TestThroughPgBouncer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	bouncer := testdb.StartPgBouncer(t, f.DB, 20)
	f.startDaemon()
	direct, err := pgx.ParseConfig(f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	var clients []*ffd.Client
	for i := range 5 {
		cfg, err := pgxpool.ParseConfig(bouncer.URL)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 40
		ffd.ConfigurePoolForPgBouncer(cfg)
		pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
		client, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, client)
		wc := ffd.WorkerConfig{Lanes: []string{"bounced"}, Concurrency: 100, PollInterval: 100 * time.Millisecond, ID: fmt.Sprint("bounced-", i),
			Handler: func(ctx context.Context, j *ffd.Job) ([]byte, error) {
				time.Sleep(2 * time.Millisecond)
				return []byte(`"ok"`), nil
			}}
		if i < 3 {
			wc.ListenConnConfig = direct
		} else {
			wc.PollOnly = true
		}
		w, err := ffd.NewWorker(client, wc)
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Start(f.Ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			w.Stop(ctx)
		})
	}
	if _, err := clients[0].CreateMany(f.Ctx, inOneLane("bounced", 2000)); err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if _, err := clients[i%5].SubmitFlow(f.Ctx, chain3("bounced")); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitFor("every execution and flow to finish", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state <> 'completed'`) == 0 &&
			f.Count(`SELECT count(*) FROM ff_flow WHERE state <> 'completed'`) == 0
	})
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`); n != 2150 {
		t.Fatalf("%d executions completed, want 2,150", n)
	}
	f.WaitFor("the cascade to drain", func() bool {
		return f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`) == 0
	})
	if err := store.CheckQuiescent(f.Ctx, f.Pool); err != nil {
		t.Fatalf("invariants after the run through PgBouncer: %v", err)
	}
}
