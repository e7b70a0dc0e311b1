package store_test

import (
	"slices"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// CompletionsBetween counts the completion events whose own time falls
// in the window, by the database's clock, and none outside it;
// FirstCompletionAfter finds the first from a time on.
func TestCompletionsBetween(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, time.Minute)
	before, err := store.Now(f.Ctx, f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		x, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "l"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := leases.Cancel(f.Ctx, f.Pool, x.ID, "test", "test"); err != nil {
			t.Fatal(err)
		}
	}
	after, err := store.Now(f.Ctx, f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		from, to time.Time
		want     int64
	}{
		{"the window of the three", before, after, 3},
		{"before them", before.Add(-time.Hour), before.Add(-time.Second), 0},
		{"after them", after.Add(time.Second), after.Add(time.Hour), 0},
	} {
		n, err := store.CompletionsBetween(f.Ctx, f.Pool, tc.from, tc.to)
		if err != nil || n != tc.want {
			t.Errorf("%s: %d completion events, %v; want %d", tc.name, n, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name  string
		from  time.Time
		found bool
	}{
		{"from before them", before, true},
		{"from after them", after.Add(time.Second), false},
	} {
		at, ok, err := store.FirstCompletionAfter(f.Ctx, f.Pool, tc.from)
		if err != nil || ok != tc.found || (ok && (at.Before(before) || at.After(after))) {
			t.Errorf("FirstCompletionAfter %s: %s, %v, %v; want found %v, between %s and %s", tc.name, at, ok, err, tc.found, before, after)
		}
	}
}

// LiveByLane counts each lane's live executions by state, and which of
// them wait on time: pending but not yet due, running on a lapsed lease.
func TestLiveByLane(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, time.Minute)
	for _, p := range []ffdtype.CreateParams{
		{Lane: "a"}, {Lane: "a"}, {Lane: "a", Delay: time.Hour},
		{Lane: "b"}, {Lane: "b"}, {Lane: "b"},
	} {
		if _, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, p); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "b", Worker: "w/1", Max: 2})
	if err != nil || len(claimed) != 2 {
		t.Fatalf("claim 2 of lane b: %d, %v", len(claimed), err)
	}
	// One lease lapses: as a worker that stopped renewing would leave it.
	if _, err := f.Pool.Exec(f.Ctx, `UPDATE ff_execution SET lease_expires_at = now() - interval '1 second'
		WHERE partition_key = $1 AND execution_id = $2`, claimed[0].ID.Partition, claimed[0].ID.UUID); err != nil {
		t.Fatal(err)
	}
	got, err := store.LiveByLane(f.Ctx, f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"a pending 3 (1 not yet due)", "b pending 1", "b running 2 (1 on lapsed leases)"}
	var said []string
	for _, d := range got {
		said = append(said, d.String())
	}
	if !slices.Equal(said, want) {
		t.Errorf("live by lane: %q; want %q", said, want)
	}
}
