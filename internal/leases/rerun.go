package leases

import (
	"context"
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// Rerun creates a new execution from a failed, expired or cancelled solo
// execution's parameters (lane, kind, payload, priority, capabilities,
// attempts, retry, lease, timeouts, tags; not its idempotency key),
// linked to it by rerun_of, on the old one's partition (where the index
// that allows one rerun looks); the old one stays as it ended. An execution
// is rerun at most once: a second call is a conflict carrying the rerun.
// Flow members are rerun with their flow (flows.RerunFlow).
func Rerun(ctx context.Context, db store.DB, lim Limits, id ffdtype.ExecutionID) (*ffdtype.Execution, error) {
	old, err := Get(ctx, db, id)
	if err != nil {
		return nil, err
	}
	switch {
	case old.FlowID != nil:
		return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "a member of flow " + old.FlowID.String() + ": rerun the flow"}
	case old.State == ffdtype.StateCompleted:
		return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "completed: nothing to rerun"}
	case !old.State.Terminal():
		return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "still " + string(old.State) + ": cancel it, or wait for it to end, before a rerun"}
	}
	lim = lim.AtLeast(len(old.Payload)) // accepted once: a smaller limit here must not refuse it
	// Minted beside its original, on the same partition.
	n, err := Normalize(ParamsOf(old), Placement{Partition: &old.ID.Partition}, lim)
	if err != nil {
		return nil, err
	}
	var x *ffdtype.Execution
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		if x, _, err = Insert(ctx, tx, n); err != nil {
			return err
		}
		if err := store.LinkRerunMembers(ctx, tx, []store.Carried{{New: x.ID, Old: old.ID}}); err != nil {
			return err
		}
		x.RerunOf = &old.ID.UUID
		return nil
	})
	if store.IsRerunTaken(err) {
		return nil, &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "already rerun; rerun the rerun to try again"}
	}
	if err != nil {
		var ve *ffdtype.ValidationError
		if errors.As(err, &ve) {
			return nil, err
		}
		return nil, wrap("rerun execution "+id.String(), err)
	}
	return x, nil
}

// ParamsOf is what x was created with, to create it again (a rerun of
// it, or of its flow): its parameters but for its idempotency key and
// its place (flow, step, partition), which the rerun decides.
func ParamsOf(x *ffdtype.Execution) ffdtype.CreateParams {
	// The version travels as Version; its capability is added back
	// when the params are normalized.
	caps := slices.DeleteFunc(slices.Clone(x.RequiredCapabilities), func(c string) bool { return c == ffdtype.VersionCapability(x.Version) })
	p := ffdtype.CreateParams{Namespace: x.Namespace, Lane: x.Lane, Kind: x.Kind, Payload: x.Payload, Priority: x.Priority,
		RequiredCapabilities: caps, MaxAttempts: x.MaxAttempts, Retry: x.Retry, LeaseTTL: x.LeaseTTL,
		AttemptTimeout: x.AttemptTimeout, Tags: x.Tags, ConcurrencyKey: x.ConcurrencyKey, Version: x.Version}
	if x.DeadlineAt != nil {
		p.Deadline = x.DeadlineAt.Sub(x.CreatedAt)
	}
	return p
}
