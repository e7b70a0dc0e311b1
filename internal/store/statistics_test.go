package store_test

import (
	"fmt"
	"testing"

	"github.com/flowfabric/ffd/internal/store"
)

// Statistics whose row count is right while what the rows are has
// changed (gathered while nothing was running, then 5,000 started):
// the refresh compares the live rows the lane statistics counted after
// the last analysis with the rows the statistics put in the live
// states, and analyzes ff_execution once.
func TestRefreshStatisticsOfLiveStates(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	b.exec(`ALTER TABLE ff_execution SET (autovacuum_enabled = false)`)
	running := func() int64 {
		t.Helper()
		var est int64
		if err := b.pool.QueryRow(b.ctx, `SELECT (c.reltuples * coalesce((SELECT sum(f.freq)
				FROM unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS f(val, freq) WHERE f.val = 'running'), 0))::bigint
			FROM pg_class c JOIN pg_stats s ON s.tablename = c.relname AND s.attname = 'state' AND s.schemaname = current_schema()
			WHERE c.oid = 'ff_execution'::regclass`).Scan(&est); err != nil {
			t.Fatalf("read the statistics' running rows: %v", err)
		}
		return est
	}
	refresh := func() []store.StaleTable {
		t.Helper()
		got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4)
		if err != nil {
			t.Fatalf("refresh: %v", err)
		}
		return got
	}
	sample := func() {
		t.Helper()
		if sampled, err := store.SampleLaneStats(b.ctx, b.pool, 0, "test"); err != nil || !sampled {
			t.Fatalf("sample the lanes: sampled %v, %v", sampled, err)
		}
	}
	b.insert("busy", "completed", 20000)
	b.exec(`ANALYZE ff_execution`)
	b.insert("busy", "running", 5000)
	// 25,000 rows against an estimate of 20,000: the row count rule
	// leaves them; and no sample after the analysis yet.
	if got := refresh(); len(got) != 0 {
		t.Fatalf("before a sample: want nothing refreshed, got %+v", got)
	}
	sample()
	got := refresh()
	if len(got) != 1 || got[0].Name != "ff_execution" || got[0].Live != 5000 || got[0].Estimated > 5000/4 {
		t.Fatalf("want ff_execution refreshed, its 5000 live rows against an estimate under 1250, got %+v", got)
	}
	if est := running(); est < 4000 {
		t.Fatalf("after the refresh the statistics put %d rows in running, want about 5000", est)
	}
	// The sample is older than the analysis now: nothing more to do.
	if got := refresh(); len(got) != 0 {
		t.Fatalf("after the refresh: want nothing refreshed, got %+v", got)
	}
	sample()
	if got := refresh(); len(got) != 0 {
		t.Fatalf("a fresh sample of fresh statistics: want nothing refreshed, got %+v", got)
	}
}

// Statistics gathered with ff_execution's rows deleted and not yet
// vacuumed put it at no row over hundreds of pages, and the planner takes
// it for empty until they are refreshed. The refresh finds the refill at
// once, by reading up to min_rows rows, not only once the writers' counts
// reach the statistics collector (here they never do: reset).
func TestRefreshStatisticsOfATableTakenForEmpty(t *testing.T) {
	t.Parallel()
	b := newPlanBench(t)
	b.exec(`ALTER TABLE ff_execution SET (autovacuum_enabled = false)`)
	b.insert("gone", "completed", 20000)
	b.exec(`DELETE FROM ff_execution`)
	b.exec(`ANALYZE ff_execution`)
	b.insert("busy", "pending", 5000)
	b.exec(`SELECT pg_stat_reset_single_table_counters('ff_execution'::regclass)`)
	got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4)
	if err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if len(got) != 1 || got[0].Name != "ff_execution" || got[0].Estimated != 0 || got[0].Live != 1000 {
		t.Fatalf("want ff_execution refreshed from an estimate of 0, at least 1000 rows read, got %+v", got)
	}
	var est int64
	if err := b.pool.QueryRow(b.ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_execution'::regclass`).Scan(&est); err != nil || est != 5000 {
		t.Fatalf("after the refresh: ff_execution estimated at %d rows (%v), want 5000", est, err)
	}
	if got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4); err != nil || len(got) != 0 {
		t.Fatalf("fresh statistics: want nothing refreshed, got %+v, %v", got, err)
	}
}

// A lane's keys created at once are analyzed at the statistician's next
// pass, not once their count reaches the statistics collector (up to
// 10 s later): ff_key read directly when its statistics are missing or
// put it under minRows/factor rows. Planned with the default selectivity
// of a lane (5 keys of 1,000), the keyed claim's turn sorted every key
// of the lane at every claim.
func TestRefreshStatisticsOfYoungKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		before   string // what the statistics saw first
		keys     int
		estimate int64 // ff_key's reltuples before the refresh
		read     int64 // rows the refresh reads to know
	}{
		{"never analyzed", ``, 1000, -1, 250},
		{"analyzed nearly empty", `ANALYZE ff_key`, 1000, 0, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := newPlanBench(t)
			b.exec(`ALTER TABLE ff_key SET (autovacuum_enabled = false)`)
			var est int64
			if tt.before != "" {
				b.exec(tt.before)
			}
			if err := b.pool.QueryRow(b.ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_key'::regclass`).Scan(&est); err != nil || est != tt.estimate {
				t.Fatalf("before: ff_key estimated at %d rows (%v), want %d: the case is wrong", est, err, tt.estimate)
			}
			b.exec(fmt.Sprintf(`INSERT INTO ff_key (lane, key, max_running) SELECT 'tenants', 'tenant-' || g, 1 FROM generate_series(1, %d) g`, tt.keys))
			b.exec(`SELECT pg_stat_reset_single_table_counters('ff_key'::regclass)`)
			got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4)
			if err != nil {
				t.Fatalf("refresh: %v", err)
			}
			if len(got) != 1 || got[0].Name != "ff_key" || got[0].Estimated != tt.estimate || got[0].Live != tt.read {
				t.Fatalf("want ff_key refreshed from an estimate of %d, %d rows read, got %+v", tt.estimate, tt.read, got)
			}
			if err := b.pool.QueryRow(b.ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_key'::regclass`).Scan(&est); err != nil || est != int64(tt.keys) {
				t.Fatalf("after the refresh: ff_key estimated at %d rows (%v), want %d", est, err, tt.keys)
			}
			if got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4); err != nil || len(got) != 0 {
				t.Fatalf("fresh statistics: want nothing refreshed, got %+v, %v", got, err)
			}
		})
	}
}
