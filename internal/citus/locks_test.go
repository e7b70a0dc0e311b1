//go:build citus

package citus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// A transaction's lock timeout bounds its waits on Citus, where a row's
// lock is waited for on the worker node that holds it, not on the
// coordinator the transaction talks to: a worker's completion, a cancel,
// and the dispatch's and the sibling cancel's transactions give up on a
// row another transaction holds after their timeout, with lock_timeout's
// error, long before their context ends (a setting that stayed on the
// coordinator left each waiting until then).
func TestLockTimeoutOnCitus(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	f := setup(t)
	lane := f.lane("locked")
	x := f.heldRow(t, lane)
	touch := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE ff_execution SET priority = priority WHERE partition_key = $1 AND execution_id = $2`, x.ID.Partition, x.ID.UUID)
		return err
	}
	cases := []struct {
		name string
		wait func(ctx context.Context) error
	}{
		{"a worker's completion", func(ctx context.Context) error {
			_, err := store.TerminateWithin(ctx, f.pool, []store.Termination{{ID: x.ID, Epoch: x.LeaseEpoch, State: ffdtype.StateCompleted, Solo: true}}, timeout)
			return err
		}},
		{"a cancel of an execution of no flow (one implicit transaction)", func(ctx context.Context) error {
			_, err := store.TerminateWithin(ctx, f.pool, []store.Termination{{ID: x.ID, State: ffdtype.StateCancelled, Reason: "test", By: "test", Solo: true}}, timeout)
			return err
		}},
		{"a cancel", func(ctx context.Context) error {
			_, err := store.TerminateWithin(ctx, f.pool, []store.Termination{{ID: x.ID, State: ffdtype.StateCancelled, Reason: "test", By: "test"}}, timeout)
			return err
		}},
		{"the dispatch's transaction", func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
				if _, err := store.TakeShardEvents(ctx, tx, []int16{x.ID.Partition}, 10, timeout); err != nil {
					return err
				}
				return touch(ctx, tx)
			})
		}},
		{"the sibling cancel's transaction", func(ctx context.Context) error {
			return pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
				if _, _, err := store.TakeCancelGroup(ctx, tx, timeout); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					return err
				}
				return touch(ctx, tx)
			})
		}},
	}
	for _, tc := range cases {
		// One at a time: each waits on the same held row.
		ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
		err := tc.wait(ctx)
		cancel()
		if !store.IsLockTimeout(err) {
			t.Errorf("%s behind a locked row with a lock timeout of %s: %v; want lock_timeout's error (55P03) within the 30 s context", tc.name, timeout, err)
		}
	}
}

// heldRow creates and claims an execution of lane and locks its row in a
// transaction of its own until the test ends.
func (f *fixture) heldRow(t *testing.T, lane string) *ffd.Execution {
	t.Helper()
	if _, err := f.client.Create(f.ctx, ffd.CreateParams{Lane: lane}); err != nil {
		t.Fatal(err)
	}
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %d claimed, %v; want 1", len(xs), err)
	}
	tx, err := f.pool.Begin(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	if _, err := tx.Exec(f.ctx, `SELECT 1 FROM ff_execution WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, xs[0].ID.Partition, xs[0].ID.UUID); err != nil {
		t.Fatal(err)
	}
	return xs[0]
}
