package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A batch renewal (a worker's renewer) extends the leases still held,
// each by its own TTL, with one renewed event each, in one transaction
// per shard; it leaves out a lease lost to a later epoch, an execution
// that ended, and a row another transaction holds locked, which it does
// not wait for (the caller renews that one alone). Both forms: one
// Postgres's, and the routed one (one statement per shard), run here on
// one Postgres. Not parallel: RouteAll reroutes the whole package.
func TestRenewMany(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routed bool
	}{
		{name: "one Postgres"},
		{name: "routed", routed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			testRenewMany(t)
		})
	}
}

func testRenewMany(t *testing.T) {
	const budget = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	db := testdb.New(t)
	ttls := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, time.Minute, time.Minute, time.Minute}
	xs := claimWithTTLs(t, ctx, db, ttls)
	held := make([]store.LeaseRef, len(xs))
	for i, x := range xs {
		held[i] = store.LeaseRef{ID: x.ID, Epoch: x.LeaseEpoch}
	}
	// xs[3]: locked by another transaction; xs[4]: completed; xs[5]:
	// asked at an epoch it never had.
	if _, err := leases.Complete(ctx, db.Pool, leases.Limits{}, xs[4].ID, xs[4].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	held[5].Epoch++
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_execution WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
		xs[3].ID.Partition, xs[3].ID.UUID); err != nil {
		t.Fatal(err)
	}

	renewed, err := store.RenewMany(ctx, db.Pool, held)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("RenewMany waited %s (the test's budget) for a row another transaction holds locked; it must skip it", budget)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(renewed) != 3 {
		t.Fatalf("renewed %d leases (%v), want the 3 held and unlocked", len(renewed), renewed)
	}
	for i := range 3 {
		checkRenewed(t, ctx, db, xs[i], renewed[held[i]], ttls[i], budget)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// One transaction for the batch; routed, one per shard of the
	// renewed leases.
	shards, err := store.ShardsOf(ctx, db.Pool, []int16{xs[0].ID.Partition, xs[1].ID.Partition, xs[2].ID.Partition})
	if err != nil {
		t.Fatal(err)
	}
	var events, txns int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT txid) FROM ff_lease_event WHERE event_type = 'renewed'`).Scan(&events, &txns); err != nil {
		t.Fatal(err)
	}
	if events != 3 || txns != len(shards) {
		t.Fatalf("%d renewed events in %d transactions; want 3, in %d (the shards they are on)", events, txns, len(shards))
	}
	// The lease the batch skipped is still held: renewed alone, it is.
	if _, err := leases.Renew(ctx, db.Pool, xs[3].ID, xs[3].LeaseEpoch); err != nil {
		t.Fatalf("renew the lease the batch skipped while it was locked: %v", err)
	}
	if _, err := leases.Renew(ctx, db.Pool, xs[5].ID, held[5].Epoch); !errors.Is(err, ffdtype.ErrLeaseLost) {
		t.Fatalf("renew at an epoch never held: %v, want a lost lease", err)
	}
	if got, err := store.RenewMany(ctx, db.Pool, nil); err != nil || len(got) != 0 {
		t.Fatalf("renew no leases: %v, %v; want nothing, no error", got, err)
	}
}

// claimWithTTLs creates an execution for each of ttls, its lease's TTL,
// and claims them all, in ttls' order.
func claimWithTTLs(t *testing.T, ctx context.Context, db *testdb.DB, ttls []time.Duration) []*ffdtype.Execution {
	t.Helper()
	ps := make([]ffdtype.CreateParams, len(ttls))
	for i, ttl := range ttls {
		ps[i] = ffdtype.CreateParams{Lane: "renew", LeaseTTL: ttl, Priority: len(ttls) - i}
	}
	if _, err := leases.CreateMany(ctx, db.Pool, leases.Limits{}, ps); err != nil {
		t.Fatal(err)
	}
	xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "renew", Worker: "w/1", Max: len(ps)})
	if err != nil || len(xs) != len(ps) {
		t.Fatalf("claimed %d of %d: %v", len(xs), len(ps), err)
	}
	return xs
}

// checkRenewed checks that x's lease was renewed to at (zero: it was
// not), as its row says, later than its claim's expiry, by its own TTL,
// and by less than the test's budget past that expiry.
func checkRenewed(t *testing.T, ctx context.Context, db *testdb.DB, x *ffdtype.Execution, at time.Time, ttl, budget time.Duration) {
	t.Helper()
	if at.IsZero() {
		t.Fatalf("the lease of %s (held, unlocked) was not renewed", x.ID)
	}
	var row time.Time
	var rowTTL time.Duration
	if err := db.Pool.QueryRow(ctx, `SELECT lease_expires_at, lease_ttl FROM ff_execution WHERE partition_key = $1 AND execution_id = $2`,
		x.ID.Partition, x.ID.UUID).Scan(&row, &rowTTL); err != nil {
		t.Fatal(err)
	}
	if !row.Equal(at) || !at.After(*x.LeaseExpiresAt) || rowTTL != ttl {
		t.Fatalf("lease of %s: renewed to %s, row says %s (TTL %s), claimed until %s; want the row's expiry, later than the claim's, by its own TTL %s",
			x.ID, at, row, rowTTL, x.LeaseExpiresAt, ttl)
	}
	if d := at.Sub(*x.LeaseExpiresAt); d > budget {
		t.Fatalf("lease of %s moved %s past its claimed expiry; want less than the test's %s (its TTL runs from the renewal)", x.ID, d, budget)
	}
}
