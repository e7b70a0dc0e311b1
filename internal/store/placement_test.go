package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A keyed row off its key's partition is refused before it is written:
// there the key's unique index could not see the key's other holders.
func TestInsertRefusesAKeyOffItsPartition(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	const ns, key = "default", "order-1"
	off := ident.NewExecutionIDIn((ident.KeyPartition(ns, key) + 1) % ident.Partitions)
	for name, r := range map[string]store.NewExecution{
		"idempotency key": {ID: off, Namespace: ns, Lane: "l", State: store.StatePending, IdempotencyKey: key},
		"unique key":      {ID: off, Namespace: ns, Lane: "l", State: store.StatePending, UniqueKey: key, UniqueWhileLive: true},
	} {
		if _, _, err := store.InsertExecution(ctx, db.Pool, r); err == nil || !strings.Contains(err.Error(), "want the key's") {
			t.Errorf("%s off its partition: %v; want a refusal", name, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_execution`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written (%v), want none", n, err)
	}
}
