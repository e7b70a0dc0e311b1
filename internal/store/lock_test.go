package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Each Locks method refuses a table that comes earlier in the global
// order than one the transaction has locked, before it runs a statement;
// the same table again, or a later one, is allowed.
func TestLocksRefuseTheWrongOrder(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	flowID := ident.NewUUID()
	down := ffdtype.ExecutionID{Partition: ident.Partition(flowID), UUID: ident.NewUUID()}
	group := func(l *store.Locks) error {
		_, _, err := l.Group(ctx, flowID, down, nil)
		return err
	}
	edge := func(l *store.Locks) error {
		_, err := l.Edge(ctx, flowID, ident.NewUUID())
		return err
	}
	executions := func(l *store.Locks) error {
		_, err := l.Executions(ctx, down.Partition, down.UUID)
		return err
	}
	flow := func(l *store.Locks) error {
		_, err := l.Flow(ctx, flowID, store.ForShare)
		return err
	}
	tests := []struct {
		name        string
		first, then func(*store.Locks) error
		wantOrder   bool
	}{
		{"groups then flow", group, flow, false},
		{"edge then executions", edge, executions, false},
		{"executions then executions", executions, executions, false},
		{"flow then groups", flow, group, true},
		{"flow then executions", flow, executions, true},
		{"executions then edge", executions, edge, true},
		{"edge then groups", edge, group, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				l := store.NewLocks(tx)
				// Missing rows are fine here: the order is checked either way.
				if err := tt.first(l); err != nil && !errors.Is(err, pgx.ErrNoRows) {
					t.Fatalf("first lock: %v", err)
				}
				err := tt.then(l)
				if got := errors.Is(err, store.ErrLockOrder); got != tt.wantOrder {
					t.Fatalf("second lock: got %v, want ErrLockOrder %v", err, tt.wantOrder)
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
