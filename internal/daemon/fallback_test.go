package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The passes that stand in for lost notifications (the timers' reload,
// the event triggers', the linker's) run at their period on one
// Postgres, and once per sweep pass on a distributed one, where each
// reads every shard. Not parallel: store.RouteAll is process-wide (the
// package's parallel tests start once this one is done).
func TestFallbackEvery(t *testing.T) {
	db := testdb.New(t)
	e := &env{cfg: Config{Pool: db.Pool}}
	for _, tc := range []struct {
		name   string
		routed bool
		want   time.Duration
	}{
		{"one Postgres", false, time.Second},
		{"distributed", true, sweepTurns * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			if got := fallbackEvery(context.Background(), e, time.Second); got != tc.want {
				t.Fatalf("a fallback pass of period 1s runs every %s, want %s", got, tc.want)
			}
		})
	}
}

// At start, a daemon on a distributed Postgres warns when a read across
// the shards may open more than one connection to each node (the setting
// `ffd migrate distribution` prints is missing); with it, or on one
// Postgres, it says nothing. Not parallel: store.RouteAll.
func TestCheckShardReads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routed  bool
		setting string // the database's citus.max_adaptive_executor_pool_size
		warn    bool
	}{
		{"distributed, Citus's default", true, "16", true},
		{"distributed, one connection a node", true, "1", false},
		{"one Postgres", false, "16", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			db := testdb.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := db.Pool.Exec(ctx, `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.max_adaptive_executor_pool_size = `+
				tc.setting+`', current_database()); END $$`); err != nil {
				t.Fatal(err)
			}
			pool, err := pgxpool.NewWithConfig(ctx, db.Pool.Config()) // sessions that start after the setting
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			core, logs := observer.New(zap.WarnLevel)
			d, err := New(Config{Pool: pool, Logger: zap.New(core), Supervisor: NopSupervisor{}})
			if err != nil {
				t.Fatal(err)
			}
			d.checkShardReads(ctx)
			lines := 0
			if tc.warn {
				lines = 1
			}
			warned := logs.FilterField(zap.Int("max_adaptive_executor_pool_size", 16)).Len() == 1
			if warned != tc.warn || logs.Len() != lines {
				t.Fatalf("warned %v (%d lines: %v), want %v", warned, logs.Len(), logs.All(), tc.warn)
			}
		})
	}
}
