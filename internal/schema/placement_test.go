package schema_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// An idempotency key taken before migration 17 (which placed keyed
// executions on their key's partition) lives on any partition. After the
// upgrade it is still held, until retention deletes its execution.
func TestKeysTakenBeforePlacementStayHeld(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 16)
	// As release 0.1 placed it: on its uuid's partition, which is not the
	// key's. Three days old, so that retention may take it.
	const ns, key = "default", "order-42"
	oldID := func() ffdtype.ExecutionID {
		u := ident.NewUUID()
		ms := time.Now().Add(-72 * time.Hour).UnixMilli()
		for i := range 6 {
			u[i] = byte(ms >> (40 - 8*i))
		}
		return ffdtype.ExecutionID{Partition: ident.Partition(u), UUID: u}
	}
	old := oldID()
	for old.Partition == ident.KeyPartition(ns, key) {
		old = oldID()
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, kind, state, idempotency_key)
		VALUES ($1, $2, $3, 'l', 'k', 'pending', $4)`, old.Partition, old.UUID, ns, key); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Up(ctx, db.Pool, 0); err != nil {
		t.Fatal(err)
	}

	create := func() (*ffdtype.Execution, bool) {
		t.Helper()
		x, existed, err := leases.Create(ctx, db.Pool, leases.Limits{}, ffdtype.CreateParams{Namespace: ns, Lane: "l", Kind: "k", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		return x, existed
	}
	if x, existed := create(); !existed || x.ID != old {
		t.Fatalf("create with the old key: existed %v, id %s; want the old holder %s", existed, x.ID, old)
	}

	// Retention frees the key with its execution.
	if _, err := db.Pool.Exec(ctx, `UPDATE ff_execution SET state = 'completed', terminal_at = now() - interval '2 days'
		WHERE partition_key = $1 AND execution_id = $2`, old.Partition, old.UUID); err != nil {
		t.Fatal(err)
	}
	n, err := store.DeleteFinishedExecutions(ctx, db.Pool, store.Ages{Default: 24 * time.Hour}, 100)
	if err != nil || n != 1 {
		t.Fatalf("retention deleted %d (%v), want the old holder", n, err)
	}
	var legacy int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_idempotency_legacy`).Scan(&legacy); err != nil || legacy != 0 {
		t.Fatalf("%d legacy keys left (%v), want 0", legacy, err)
	}
	x, existed := create()
	if existed || x.ID.Partition != ident.KeyPartition(ns, key) {
		t.Fatalf("create after retention: existed %v, partition %d; want a new execution on the key's partition %d", existed, x.ID.Partition, ident.KeyPartition(ns, key))
	}
	if x2, existed := create(); !existed || x2.ID != x.ID {
		t.Fatalf("second create: existed %v, id %s; want the new holder %s", existed, x2.ID, x.ID)
	}
}

// migratedTo gives a test a database migrated up to version (an older
// schema, to write rows the way an older release did), and a context that
// bounds the test.
func migratedTo(t *testing.T, version int64) (context.Context, *testdb.DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	db := testdb.NewEmpty(t)
	if _, err := schema.UpTo(ctx, db.Pool, version, 0); err != nil {
		t.Fatal(err)
	}
	return ctx, db
}
