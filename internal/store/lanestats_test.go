package store_test

import (
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A sample counts each lane's live work by state, dates its oldest due
// execution, and replaces the rows of the sample before (a lane with no
// live work left has no row); a second sample within the interval, or
// while another session holds the sample's row, counts nothing.
func TestSampleLaneStats(t *testing.T) {
	t.Parallel()
	db := testdb.Setup(t, time.Minute)
	create := func(lane string, delay time.Duration) {
		t.Helper()
		if _, _, err := leases.Create(db.Ctx, db.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: lane, Delay: delay}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		create("a", 0)
	}
	create("a", time.Hour)
	create("b", 0)
	if xs, err := leases.Claim(db.Ctx, db.Pool, ffdtype.ClaimParams{Lane: "a", Worker: "w/1", Max: 1}); err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v (%d)", err, len(xs))
	}
	if _, err := db.Pool.Exec(db.Ctx, `UPDATE ff_execution SET run_at = now() - interval '90 seconds'
		WHERE lane = 'a' AND state = 'pending' AND run_at <= now()`); err != nil {
		t.Fatal(err)
	}
	sample := func(every time.Duration) bool {
		t.Helper()
		ok, err := store.SampleLaneStats(db.Ctx, db.Pool, every, "test/1")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !sample(time.Minute) {
		t.Fatal("the first sample: want it taken")
	}
	stats, at, err := store.LaneStats(db.Ctx, db.Pool)
	if err != nil || at.IsZero() || len(stats) != 2 {
		t.Fatalf("lane statistics %+v at %v (%v), want lanes a and b", stats, at, err)
	}
	want := []store.LaneLoad{{Lane: "a", Pending: 2, Delayed: 1, Running: 1}, {Lane: "b", Pending: 1}}
	for i, s := range stats {
		if s.LaneLoad != want[i] {
			t.Errorf("lane %d: %+v, want %+v", i, s.LaneLoad, want[i])
		}
	}
	if lag := stats[0].Lag(); lag < 89*time.Second || lag > 10*time.Minute {
		t.Errorf("lane a lags %v, want about 90 s (its oldest due execution's wait)", lag)
	}
	if stats[1].Lag() <= 0 || stats[1].Lag() > 5*time.Minute {
		t.Errorf("lane b lags %v, want its one due execution's short wait", stats[1].Lag())
	}

	// Fresh: not counted again.
	create("b", 0)
	if sample(time.Minute) {
		t.Fatal("a sample younger than the interval: want none taken")
	}
	// Another session sampling now (it holds the lock): not counted twice.
	tx, err := db.Pool.Begin(db.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(db.Ctx, `SELECT pg_advisory_xact_lock($1)`, store.LaneSampleLock); err != nil {
		t.Fatal(err)
	}
	if sample(0) {
		t.Fatal("a sample while another session holds the sampler's lock: want none taken")
	}
	if err := tx.Rollback(db.Ctx); err != nil {
		t.Fatal(err)
	}
	// Lane a drained: its row goes.
	if _, err := db.Pool.Exec(db.Ctx, `DELETE FROM ff_execution WHERE lane = 'a'`); err != nil {
		t.Fatal(err)
	}
	if !sample(0) {
		t.Fatal("a sample older than the interval: want it taken")
	}
	stats, _, err = store.LaneStats(db.Ctx, db.Pool)
	if err != nil || len(stats) != 1 || stats[0].LaneLoad != (store.LaneLoad{Lane: "b", Pending: 2}) {
		t.Fatalf("after lane a drained: %+v (%v), want lane b alone with 2 pending", stats, err)
	}
	var by string
	if err := db.Pool.QueryRow(db.Ctx, `SELECT sampled_by FROM ff_lane_stats_sample`).Scan(&by); err != nil || by != "test/1" {
		t.Fatalf("sampled_by %q (%v), want the sampler's name", by, err)
	}
	// The sample's row deleted by hand: never sampled, and the next
	// sample puts it back.
	if _, err := db.Pool.Exec(db.Ctx, `DELETE FROM ff_lane_stats_sample`); err != nil {
		t.Fatal(err)
	}
	if _, at, err := store.LaneStats(db.Ctx, db.Pool); err != nil || !at.IsZero() {
		t.Fatalf("with no sample row: sampled at %v (%v), want never", at, err)
	}
	if !sample(time.Minute) {
		t.Fatal("a sample with no sample row: want it taken")
	}
	if _, at, err := store.LaneStats(db.Ctx, db.Pool); err != nil || at.IsZero() {
		t.Fatalf("after the sample: sampled at %v (%v), want a time", at, err)
	}
}
