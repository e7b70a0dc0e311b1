package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/flowfabric/ffd"
)

// CreateMany enqueues a batch in one call, in order, and workers run it;
// one invalid row, an idempotency key or too many rows reject the whole
// batch with a ValidationError and write nothing; inside a transaction the
// batch lives or dies with it.
func TestCreateMany(t *testing.T) {
	t.Parallel()
	f := setup(t)
	count := func() int { return f.Count(`SELECT count(*) FROM ff_execution`) }
	ps := make([]ffd.CreateParams, 300)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: "bulk", Kind: fmt.Sprint("k", i), JSON: map[string]int{"i": i}}
	}
	xs, err := f.client.CreateMany(f.Ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range xs {
		if x.Kind != ps[i].Kind || x.State != ffd.StatePending || string(x.Payload) != fmt.Sprintf(`{"i":%d}`, i) {
			t.Fatalf("row %d came back as kind %q state %s payload %s", i, x.Kind, x.State, x.Payload)
		}
	}

	for name, bad := range map[string][]ffd.CreateParams{
		"an invalid row":     {{Lane: "bulk"}, {Lane: "bulk", MaxAttempts: -1}},
		"an idempotency key": {{Lane: "bulk", IdempotencyKey: "once"}},
		"too many rows":      make([]ffd.CreateParams, ffd.MaxCreateMany+1),
	} {
		if _, err := f.client.CreateMany(f.Ctx, bad); !errors.Is(err, ffd.ErrValidation) {
			t.Errorf("%s: %v, want a ValidationError", name, err)
		}
	}
	if n := count(); n != len(ps) {
		t.Fatalf("%d executions after refused batches, want %d", n, len(ps))
	}

	tx, err := f.DB.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateManyTx(f.Ctx, tx, ps[:10]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != len(ps) {
		t.Fatalf("%d executions after a rolled-back batch, want %d", n, len(ps))
	}

	f.startWorker(ffd.WorkerConfig{Lanes: []string{"bulk"}, Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }})
	f.WaitFor("the batch to run", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == len(ps)
	})
}
