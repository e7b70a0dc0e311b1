package ffd_test

import (
	"errors"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/ident"
)

// A unique key holds while its execution is live: a second create returns
// the holder; once it ends, the key is free. A windowed key holds for its
// window whatever the holder's state. Both are refused where they cannot
// work.
func TestUniqueKeys(t *testing.T) {
	t.Parallel()
	f := setup(t)
	create := func(p ffd.CreateParams) *ffd.CreateResult {
		t.Helper()
		res, err := f.client.Create(f.Ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	live := ffd.CreateParams{Lane: "uniq", Kind: "sync", UniqueKey: "sync:account-7"}
	first := create(live)
	if kp := ident.KeyPartition("default", "sync:account-7"); first.Execution.ID.Partition != kp {
		t.Fatalf("unique key's holder on partition %d, want the key's %d", first.Execution.ID.Partition, kp)
	}
	again := create(live)
	if first.Existed || !again.Existed || again.Execution.ID != first.Execution.ID {
		t.Fatalf("while live: first existed=%v, second existed=%v (%s vs %s); want the second to return the first",
			first.Existed, again.Existed, again.Execution.ID, first.Execution.ID)
	}
	if _, err := f.client.Cancel(f.Ctx, first.Execution.ID, "done", "test"); err != nil {
		t.Fatal(err)
	}
	if after := create(live); after.Existed || after.Execution.ID == first.Execution.ID {
		t.Fatalf("after the holder ended: existed=%v; want a new execution", after.Existed)
	}

	windowed := ffd.CreateParams{Lane: "uniq", Kind: "report", UniqueKey: "daily-report", UniqueWindow: 24 * time.Hour}
	w1 := create(windowed)
	if _, err := f.client.Cancel(f.Ctx, w1.Execution.ID, "done", "test"); err != nil {
		t.Fatal(err)
	}
	if w2 := create(windowed); !w2.Existed || w2.Execution.ID != w1.Execution.ID {
		t.Fatalf("within the window, after the holder ended: existed=%v; want the holder", w2.Existed)
	}

	// Inside a caller's transaction a held key aborts nothing.
	tx, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(f.Ctx)
	held, err := f.client.CreateTx(f.Ctx, tx, windowed)
	if err != nil || !held.Existed {
		t.Fatalf("in a transaction: %+v %v; want the holder", held, err)
	}
	if _, err := f.client.CreateTx(f.Ctx, tx, ffd.CreateParams{Lane: "uniq"}); err != nil {
		t.Fatalf("the transaction is unusable after a held unique key: %v", err)
	}

	for name, p := range map[string]ffd.CreateParams{
		"with an idempotency key": {Lane: "uniq", UniqueKey: "k", IdempotencyKey: "k"},
		"a window without a key":  {Lane: "uniq", UniqueWindow: time.Hour},
		"a window too short":      {Lane: "uniq", UniqueKey: "k", UniqueWindow: time.Millisecond},
	} {
		var ve *ffd.ValidationError
		if _, err := f.client.Create(f.Ctx, p); !errors.As(err, &ve) {
			t.Errorf("%s: %v; want a ValidationError", name, err)
		}
	}
	if _, err := f.client.CreateMany(f.Ctx, []ffd.CreateParams{{Lane: "uniq", UniqueKey: "k"}}); err == nil {
		t.Error("a unique key in a batch was accepted")
	}
	// A member lives on its flow's partition; its key's holders could not
	// all be found on the key's.
	var ve *ffd.ValidationError
	if _, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "uniq", UniqueKey: "k"}}}}); !errors.As(err, &ve) {
		t.Errorf("a unique key on a flow member: %v; want a ValidationError", err)
	}
}

// Twenty concurrent creates with one unique key create one execution;
// every other returns it.
func TestUniqueKeyUnderConcurrency(t *testing.T) {
	t.Parallel()
	f := setup(t)
	results := make(chan *ffd.CreateResult, 20)
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			res, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "race", UniqueKey: "only-one"})
			results <- res
			errs <- err
		}()
	}
	created := map[ffd.ExecutionID]bool{}
	fresh := 0
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		res := <-results
		created[res.Execution.ID] = true
		if !res.Existed {
			fresh++
		}
	}
	if len(created) != 1 || fresh != 1 {
		t.Fatalf("%d distinct executions, %d created fresh; want one of each", len(created), fresh)
	}
}
