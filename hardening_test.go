package ffd_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// fingerprint digests every row of every ff_ table, so a test can show that
// a refused call wrote nothing at all.
func (f *fixture) fingerprint() string {
	f.T.Helper()
	var s string
	err := f.DB.Pool.QueryRow(f.Ctx, `SELECT concat_ws('|',
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_execution t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_attempt t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_completion_event t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_lease_event t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_flow t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_edge t),
		(SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t::text), '')) FROM ff_edge_group t))`).Scan(&s)
	if err != nil {
		f.T.Fatalf("fingerprint: %v", err)
	}
	return s
}

// inTx runs fn in a transaction it commits when fn succeeds.
func (f *fixture) inTx(fn func(tx pgx.Tx) error) error {
	f.T.Helper()
	tx, err := f.DB.Pool.Begin(f.Ctx)
	if err != nil {
		f.T.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(f.Ctx)
}

// refused asserts that err is a ValidationError naming field and that the
// database did not change since before.
func (f *fixture) refused(what string, err error, field, before string) {
	f.T.Helper()
	var ve *ffd.ValidationError
	if !errors.As(err, &ve) {
		f.T.Fatalf("%s: want a ValidationError naming %s, got %v", what, field, err)
	}
	if ve.Field != field {
		f.T.Fatalf("%s: ValidationError names %q, want %q (%v)", what, ve.Field, field, err)
	}
	if after := f.fingerprint(); after != before {
		f.T.Fatalf("%s: the refused call wrote to the database", what)
	}
}

// Epoch 0 is what Get reports for an unclaimed execution; no public fenced
// call may treat it as "unfenced".
func TestEpochZeroIsRefusedEverywhere(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pending := f.mustCreate(ffd.CreateParams{Lane: "fence"})
	leased := f.mustCreate(ffd.CreateParams{Lane: "fence.held"})
	claimed := []*ffd.Execution{f.claimOne(leased)}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "up", Params: ffd.CreateParams{Lane: "fence.flow"}}, {Ref: "down", Params: ffd.CreateParams{Lane: "fence.flow"}}},
		Edges: []ffd.SubmitEdge{{From: "up", To: "down"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	blocked := sub.Executions["down"]
	if got, err := f.client.Get(f.Ctx, pending.ID); err != nil || got.LeaseEpoch != 0 {
		t.Fatalf("an unclaimed execution should report epoch 0: %+v %v", got, err)
	}

	calls := map[string]func(id ffd.ExecutionID, epoch int64) error{
		"Complete": func(id ffd.ExecutionID, epoch int64) error {
			_, err := f.client.Complete(f.Ctx, id, epoch, []byte("forged"))
			return err
		},
		"CompleteTx": func(id ffd.ExecutionID, epoch int64) error {
			return f.inTx(func(tx pgx.Tx) error {
				_, err := f.client.CompleteTx(f.Ctx, tx, id, epoch, []byte("forged"))
				return err
			})
		},
		"Fail": func(id ffd.ExecutionID, epoch int64) error {
			_, err := f.client.Fail(f.Ctx, id, epoch, ffd.FailParams{Error: "forged"})
			return err
		},
		"FailTx": func(id ffd.ExecutionID, epoch int64) error {
			return f.inTx(func(tx pgx.Tx) error {
				_, err := f.client.FailTx(f.Ctx, tx, id, epoch, ffd.FailParams{Error: "forged", Retryable: true})
				return err
			})
		},
		"Renew": func(id ffd.ExecutionID, epoch int64) error {
			_, err := f.client.Renew(f.Ctx, id, epoch)
			return err
		},
		"RenewTx": func(id ffd.ExecutionID, epoch int64) error {
			return f.inTx(func(tx pgx.Tx) error {
				_, err := f.client.RenewTx(f.Ctx, tx, id, epoch)
				return err
			})
		},
	}
	targets := map[string]ffd.ExecutionID{"pending": pending.ID, "leased to another worker": leased.ID, "blocked flow member": blocked.ID}
	for name, call := range calls {
		for what, id := range targets {
			for _, epoch := range []int64{0, -1} {
				before := f.fingerprint()
				f.refused(name+" on a "+what, call(id, epoch), "lease_epoch", before)
			}
		}
	}
	// The holder's lease and result are intact.
	out, err := f.client.Complete(f.Ctx, claimed[0].ID, claimed[0].LeaseEpoch, []byte("mine"))
	if err != nil || out.Repeated || string(out.Result) != "mine" {
		t.Fatalf("the holder's completion: %+v %v", out, err)
	}
	if got, _ := f.client.Get(f.Ctx, leased.ID); string(got.Result) != "mine" {
		t.Fatalf("stored result %q, want the holder's", got.Result)
	}
	if err := store.CheckInvariants(f.Ctx, f.DB.Pool); err != nil {
		t.Fatal(err)
	}
}

// A finished execution cannot join a flow: it could never finish it, and
// the flow would stay open forever.
func TestAddFinishedExecutionToFlowIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t)
	solo := f.mustCreate(ffd.CreateParams{Lane: "strand"})
	if _, err := f.client.Complete(f.Ctx, solo.ID, f.claimOne(solo).LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	// A flow on the solo execution's partition, so that only its state
	// stands in the way.
	flow, err := f.client.CreateFlow(f.Ctx, ffd.CreateFlowParams{ID: flowIDOnPartition(t, solo.ID.Partition)})
	if err != nil {
		t.Fatal(err)
	}
	before := f.fingerprint()
	_, err = f.client.AddExecutionToFlow(f.Ctx, flow.Flow.ID, solo.ID)
	var te *ffd.AlreadyTerminalError
	if !errors.Is(err, ffd.ErrAlreadyTerminal) || !errors.As(err, &te) || te.State != "completed" || te.Object != "execution" {
		t.Fatalf("adding a completed execution: want an AlreadyTerminalError for the execution (completed), got %v", err)
	}
	if f.fingerprint() != before {
		t.Fatal("the refused add wrote to the database")
	}
	// A live execution can still join, and finishing it finishes the flow.
	live := f.mustCreate(ffd.CreateParams{Lane: "strand.live"})
	for live.ID.Partition != solo.ID.Partition {
		live = f.mustCreate(ffd.CreateParams{Lane: "strand.live"})
	}
	if _, err := f.client.AddExecutionToFlow(f.Ctx, flow.Flow.ID, live.ID); err != nil {
		t.Fatalf("adding a pending execution: %v", err)
	}
	if _, err := f.client.Cancel(f.Ctx, live.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	got, err := f.client.DescribeFlow(f.Ctx, flow.Flow.ID)
	if err != nil || got.State != ffd.FlowCompleted {
		t.Fatalf("flow after its only member ended: %+v %v", got, err)
	}
	if err := store.CheckInvariants(f.Ctx, f.DB.Pool); err != nil {
		t.Fatal(err)
	}
}

// flowIDOnPartition mints a flow id on the given partition.
func flowIDOnPartition(t *testing.T, part int16) uuid.UUID {
	t.Helper()
	for range 1 << 20 {
		if id := ident.NewUUID(); ident.Partition(id) == part {
			return id
		}
	}
	t.Fatal("no flow id on the partition")
	return uuid.Nil
}

func (f *fixture) mustCreate(p ffd.CreateParams) *ffd.Execution {
	f.T.Helper()
	r, err := f.client.Create(f.Ctx, p)
	if err != nil {
		f.T.Fatalf("create: %v", err)
	}
	return r.Execution
}

// claimOne claims x, alone in its lane.
func (f *fixture) claimOne(x *ffd.Execution) *ffd.Execution {
	f.T.Helper()
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: x.Lane, Worker: "w/1"})
	if err != nil || len(xs) != 1 || xs[0].ID != x.ID {
		f.T.Fatalf("claim %s: %v", x.ID, err)
	}
	return xs[0]
}

// Every bad input is a typed error before any write.
func TestBadInputsAreTypedAndWriteNothing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.mustCreate(ffd.CreateParams{Lane: "bad"})
	held := f.mustCreate(ffd.CreateParams{Lane: "bad.held"})
	epoch := f.claimOne(held).LeaseEpoch
	bad := ffd.ExecutionID{Partition: 300, UUID: x.ID.UUID}
	cases := []struct {
		name  string
		field string
		call  func() error
	}{
		{"NUL in kind", "kind", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Kind: "a\x00b"})
			return err
		}},
		{"invalid UTF-8 in kind", "kind", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Kind: "a\xffb"})
			return err
		}},
		{"NUL in idempotency key", "idempotency_key", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", IdempotencyKey: "k\x00"})
			return err
		}},
		{"NUL in a tag value", "tags", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Tags: map[string]any{"k": "v\x00"}})
			return err
		}},
		{"NUL in a tag key", "tags", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Tags: map[string]any{"k\x00": 1}})
			return err
		}},
		{"invalid UTF-8 in a nested tag", "tags", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Tags: map[string]any{"k": []any{"\xff"}}})
			return err
		}},
		{"NUL in a capability", "required_capabilities", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", RequiredCapabilities: []string{"gpu\x00"}})
			return err
		}},
		{"NaN multiplier", "retry.multiplier", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Retry: ffd.RetryPolicy{Multiplier: math.NaN()}})
			return err
		}},
		{"infinite multiplier", "retry.multiplier", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Retry: ffd.RetryPolicy{Multiplier: math.Inf(1)}})
			return err
		}},
		{"NaN jitter", "retry.jitter", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Retry: ffd.RetryPolicy{Jitter: math.NaN()}})
			return err
		}},
		{"partition 300 in Get", "execution_id", func() error { _, err := f.client.Get(f.Ctx, bad); return err }},
		{"partition 300 in Cancel", "execution_id", func() error { _, err := f.client.Cancel(f.Ctx, bad, "", ""); return err }},
		{"partition 300 in Complete", "execution_id", func() error { _, err := f.client.Complete(f.Ctx, bad, 1, nil); return err }},
		{"result over the payload limit", "result", func() error {
			_, err := f.client.Complete(f.Ctx, held.ID, epoch, make([]byte, ffd.DefaultMaxPayloadBytes+1))
			return err
		}},
		{"error over its limit", "error", func() error {
			_, err := f.client.Fail(f.Ctx, held.ID, epoch, ffd.FailParams{Error: strings.Repeat("e", ffd.MaxErrorBytes+1)})
			return err
		}},
		{"NUL in an error", "error", func() error {
			_, err := f.client.Fail(f.Ctx, held.ID, epoch, ffd.FailParams{Error: "boom\x00"})
			return err
		}},
		{"reason over its limit", "reason", func() error {
			_, err := f.client.Cancel(f.Ctx, x.ID, strings.Repeat("r", ffd.MaxReasonBytes+1), "")
			return err
		}},
		{"a 1 MiB reason", "reason", func() error { _, err := f.client.Cancel(f.Ctx, x.ID, strings.Repeat("r", 1<<20), ""); return err }},
		{"by over its limit", "by", func() error {
			_, err := f.client.Cancel(f.Ctx, x.ID, "", strings.Repeat("b", ffd.MaxCancelledByBytes+1))
			return err
		}},
		{"revoke reason with NUL", "reason", func() error { _, err := f.client.Revoke(f.Ctx, held.ID, "r\x00"); return err }},
		{"tags over their limit", "tags", func() error {
			_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad", Tags: map[string]any{"k": strings.Repeat("t", ffd.MaxTagsBytes)}})
			return err
		}},
	}
	for _, c := range cases {
		before := f.fingerprint()
		f.refused(c.name, c.call(), c.field, before)
	}

	// Configuration errors are typed too.
	if _, err := ffd.NewClient(f.DB.Pool, &ffd.Config{MaxPayloadBytes: -1}); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("MaxPayloadBytes -1: want a ValidationError, got %v", err)
	}
	if _, err := ffd.NewClient(f.DB.Pool, &ffd.Config{MaxPayloadBytes: ffd.MaxMaxPayloadBytes + 1}); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("MaxPayloadBytes over the maximum: want a ValidationError, got %v", err)
	}
	// A consumer that was never registered is not found, not a plain error.
	tx, err := f.DB.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	if err := f.client.AckTx(f.Ctx, tx, "nobody", ffd.OutboxCursor{}); !errors.Is(err, ffd.ErrNotFound) {
		t.Errorf("ack of an unregistered consumer: want ErrNotFound, got %v", err)
	}
}
