package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A create with a unique key whose holder ends between the refusal and
// the read of the holder, again and again (another creator takes the key
// before each try and lets it go right after), returns the new execution
// once the churn stops: never an untyped "no rows" (it gave up after three
// rounds, 20 times in ~20,600 creates of the fault run).
func TestUniqueKeyUnderChurnReturnsAnExecution(t *testing.T) {
	// Not parallel: the hook is the package's.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.New(t)
	const ns, key, rounds = "default", "sync:account-7", 8
	part := ident.KeyPartition(ns, key)
	churned := 0
	var holder ffdtype.ExecutionID
	store.SetUniqueRaceHook(func(k string) {
		if k != key || churned >= rounds {
			return
		}
		// Another creator takes the key...
		holder = ident.NewSoloExecutionIDIn(part)
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_execution (partition_key, execution_id, namespace, lane, state, unique_key, unique_while_live)
			VALUES ($1, $2, $3, 'l', 'pending', $4, true)`, holder.Partition, holder.UUID, ns, key); err != nil {
			t.Error(err)
		}
	}, func(k string) {
		if k != key || churned >= rounds {
			return
		}
		// ...and its execution ends before this create reads the holder.
		churned++
		if ended, err := store.Terminate(ctx, db.Pool, []store.Termination{{ID: holder, State: ffdtype.StateCancelled, Reason: "churn", By: "test"}}); err != nil || len(ended) != 1 {
			t.Errorf("end the holder: %v (%d ended)", err, len(ended))
		}
	})
	defer store.SetUniqueRaceHook(nil, nil)
	id := ident.NewSoloExecutionIDIn(part)
	x, existed, err := store.InsertExecution(ctx, db.Pool, store.NewExecution{ID: id, Namespace: ns, Lane: "l",
		State: ffdtype.StatePending, MaxAttempts: 1, LeaseTTL: time.Minute, Payload: []byte{},
		Retry:     ffdtype.RetryPolicy{Base: time.Second, Max: time.Minute, Multiplier: 2},
		UniqueKey: key, UniqueWhileLive: true, RequiredCapabilities: []string{}, Tags: map[string]any{}})
	if err != nil {
		t.Fatalf("create under churn: %v; want the new execution", err)
	}
	if existed || x.ID != id {
		t.Fatalf("create under churn: existed %v, id %s; want the new execution %s", existed, x.ID, id)
	}
	if churned != rounds {
		t.Fatalf("the key churned %d times, want %d (the test did not exercise the race)", churned, rounds)
	}
	if err := store.CheckInvariants(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}
