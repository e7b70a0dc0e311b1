package daemon_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/store"
)

// A queue analyzed while drained keeps a row estimate of zero however
// much it fills again, and the planner plans every batch on it as if it
// were empty, until autovacuum analyzes it again (up to a minute later).
// The daemon notices and analyzes it itself, once; a role that only
// writes rows (the daemon's, with deploy/roles.sql) does so through
// ff_refresh_statistics, which runs as the tables' owner.
func TestDaemonRefreshesStaleStatistics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	estimate := func() int {
		return f.Count(`SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_execution'::regclass`)
	}
	// Every set-up statement runs on one connection and publishes its
	// statistics counters when it ends (not up to a second later), so
	// they reach the shared counters in the order they ran.
	conn, err := f.Pool.Acquire(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	exec := func(sql string) {
		t.Helper()
		// One pipelined batch, so the flush is asked for inside the
		// statement's transaction and happens when it ends.
		b := &pgx.Batch{}
		b.Queue(sql)
		b.Queue(`SELECT pg_stat_force_next_flush()`)
		if err := conn.SendBatch(f.Ctx, b).Close(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// A queue drained and analyzed, then refilled with 5,000 rows: an
	// estimate of zero over the pages the queue left behind. Autovacuum
	// stays out of this database's table, so that only ffd refreshes it.
	drainAndRefill := func() {
		t.Helper()
		exec(`DELETE FROM ff_execution`)
		if _, err := conn.Exec(f.Ctx, `VACUUM (TRUNCATE false, ANALYZE) ff_execution`); err != nil { // it publishes its counts itself
			t.Fatal(err)
		}
		if got := estimate(); got != 0 {
			t.Fatalf("set-up: ff_execution's row estimate is %d after a drained VACUUM ANALYZE, want 0", got)
		}
		exec(`INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state)
			SELECT (random() * 255)::int, gen_random_uuid(), 'stats', 'stats', 'pending' FROM generate_series(1, 5000)`)
	}
	f.Exec(`ALTER TABLE ff_execution SET (autovacuum_enabled = false)`)
	exec(`INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state)
		SELECT (random() * 255)::int, gen_random_uuid(), 'stats', 'stats', 'pending' FROM generate_series(1, 20000)`)
	drainAndRefill()
	if live := f.Count(`SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = 'ff_execution'::regclass`); estimate() != 0 || live != 5000 {
		t.Fatalf("ff_execution estimated at %d rows, counted %d live, want 0 and 5000", estimate(), live)
	}

	core, logs := observer.New(zap.InfoLevel)
	m := daemon.NewMetrics()
	d := f.startDaemon(daemon.Config{StatisticsInterval: 100 * time.Millisecond, Logger: zap.New(core), Metrics: m})
	f.WaitFor("the daemon to analyze ff_execution", func() bool { return logs.FilterMessage("planner statistics refreshed").Len() > 0 })
	refreshed := logs.FilterMessage("planner statistics refreshed").All()
	if refreshed[0].ContextMap()["table"] != "ff_execution" || refreshed[0].ContextMap()["live_rows"] != int64(5000) || estimate() < 5000/4 {
		t.Fatalf("want ff_execution analyzed (estimate now %d) and an Info log naming it with its 5000 live rows, got %v", estimate(), refreshed)
	}
	// Fresh statistics are left alone: one refresh, however long it runs.
	time.Sleep(500 * time.Millisecond)
	if got := counterValue(t, m, "ffd_statistics_refreshed_total"); got != 1 {
		t.Fatalf("ffd_statistics_refreshed_total = %v, want 1 (statistics once fresh are not refreshed again)", got)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}

	// ANALYZE needs the table's owner. A role that only writes rows, as
	// the daemon's does in deploy/roles.sql, refreshes them through the
	// function, which runs as its owner.
	drainAndRefill()
	role := "stats_" + strings.ToLower(f.DB.Name)
	f.Exec(`CREATE ROLE ` + role + ` LOGIN`)
	t.Cleanup(func() { f.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) }) //nolint:errcheck
	u, _ := url.Parse(f.DB.URL)
	u.User = url.User(role)
	other, err := pgx.Connect(f.Ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(context.Background())
	if _, err := other.Exec(f.Ctx, `ANALYZE ff_execution`); err != nil || estimate() != 0 {
		t.Fatalf("set-up: a role that owns nothing analyzed ff_execution itself (%v, estimate %d)", err, estimate())
	}
	got, err := store.RefreshStaleStatistics(f.Ctx, other, 1000, 4)
	if err != nil || len(got) != 1 || got[0].Name != "ff_execution" || estimate() < 5000/4 {
		t.Fatalf("refreshed as a role that owns nothing: %+v (%v), estimate now %d; want ff_execution refreshed", got, err, estimate())
	}
	if _, err := store.RefreshStaleStatistics(f.Ctx, other, 0, 4); err == nil {
		t.Fatal("ff_refresh_statistics took min_rows 0, want it refused")
	}
}

// A table never analyzed has no statistics of its columns, and the
// planner takes a default selectivity for every test of one (0.5% of the
// rows for a lane): ff_key, filled by the first keyed creates, made the
// keys' turn read every key of a lane. The refresh analyzes a table never
// analyzed once it holds min_rows / factor rows, and not before.
func TestRefreshAnalyzesYoungTables(t *testing.T) {
	t.Parallel()
	f := setup(t)
	estimate := func() int {
		return f.Count(`SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_key'::regclass`)
	}
	conn, err := f.Pool.Acquire(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	f.Exec(`ALTER TABLE ff_key SET (autovacuum_enabled = false)`)
	insert := func(from, to int) {
		t.Helper()
		b := &pgx.Batch{}
		b.Queue(`INSERT INTO ff_key (lane, key) SELECT 'young', 'k' || g FROM generate_series($1::int, $2::int) g`, from, to)
		b.Queue(`SELECT pg_stat_force_next_flush()`)
		if err := conn.SendBatch(f.Ctx, b).Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := estimate(); got >= 0 {
		t.Fatalf("set-up: ff_key estimated at %d rows, want never analyzed (-1)", got)
	}
	cases := []struct {
		upTo     int
		analyzed bool
	}{
		{200, false}, // under 1000 / 4
		{300, true},
	}
	from := 1
	for _, c := range cases {
		insert(from, c.upTo)
		from = c.upTo + 1
		got, err := store.RefreshStaleStatistics(f.Ctx, f.Pool, 1000, 4)
		if err != nil {
			t.Fatal(err)
		}
		named := len(got) == 1 && got[0].Name == "ff_key" && got[0].Estimated < 0 && got[0].Live == int64(c.upTo)
		if c.analyzed != named || c.analyzed != (estimate() == c.upTo) {
			t.Fatalf("at %d keys: refreshed %+v, estimate now %d; want analyzed %v (at least 1000 / 4 rows)", c.upTo, got, estimate(), c.analyzed)
		}
	}
}
