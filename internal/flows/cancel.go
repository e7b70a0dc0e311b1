package flows

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// Attribution of members cancelled with their flow.
const (
	FlowCancelReason = "flow_cancelled"
	FlowCancelledBy  = "cancel_flow"
)

// Cancel cancels a flow (cancel_flow). Every member it cancels goes
// through store.Terminate (completion event `cancelled`; a running member
// is fenced with lease event `revoked`). The flow writes its own
// `cancelled` completion event. Idempotent: a repeat returns the stored
// policy and members; a completed or failed flow is already terminal.
func Cancel(ctx context.Context, db store.DB, flowID uuid.UUID, policy ffdtype.CancelPolicy, reason string) (*ffdtype.CancelFlowResult, error) {
	var states []ffdtype.State
	switch policy {
	case ffdtype.CancelFlowOnly:
	case ffdtype.CancelAll:
		states = []ffdtype.State{ffdtype.StateBlocked, ffdtype.StatePending, ffdtype.StateRunning}
	case ffdtype.CancelPending:
		states = []ffdtype.State{ffdtype.StateBlocked, ffdtype.StatePending}
	default:
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "policy", string(policy), "want flow_only, cancel_all or cancel_pending")
	}
	if reason == "" {
		reason = FlowCancelReason
	}
	var res *ffdtype.CancelFlowResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		f, err := Get(ctx, tx, flowID)
		if err != nil {
			return err
		}
		if r, done, err := cancelled(f); done {
			res = r
			return err
		}
		locks := store.NewLocks(tx)
		var members []store.LockedMember
		if len(states) > 0 {
			if members, err = locks.Members(ctx, flowID, states); err != nil {
				return err
			}
		}
		if f, err = locks.Flow(ctx, flowID, store.ForUpdate); err != nil {
			return err
		}
		if r, done, err := cancelled(f); done {
			res = r
			return err
		}
		res, err = cancelFlow(ctx, tx, f, policy, reason, members)
		return err
	})
	if err != nil {
		return nil, wrapOp("cancel flow "+flowID.String(), err)
	}
	return res, nil
}

// cancelFlow cancels an open flow and the members the caller holds.
func cancelFlow(ctx context.Context, tx pgx.Tx, f *ffdtype.Flow, policy ffdtype.CancelPolicy, reason string, members []store.LockedMember) (*ffdtype.CancelFlowResult, error) {
	ids := make([]ffdtype.ExecutionID, len(members))
	uuids := make([]uuid.UUID, len(members))
	ends := make([]store.Termination, len(members))
	for i := range members {
		m := &members[i]
		ids[i], uuids[i] = ffdtype.ExecutionID{Partition: f.Partition, UUID: m.ID}, m.ID
		ends[i] = store.Termination{ID: ids[i], State: ffdtype.StateCancelled, Reason: reason, By: FlowCancelledBy, Locked: &m.Row}
	}
	if err := store.CancelFlow(ctx, tx, f.ID, policy, reason, uuids); err != nil {
		return nil, err
	}
	// The members are locked by this transaction, as Members read them:
	// Terminate updates them without locking them again (on one
	// Postgres), then looks at their flow, which this transaction holds
	// too.
	ended, err := store.Terminate(ctx, tx, ends)
	if err != nil {
		return nil, err
	}
	if len(ended) != len(members) {
		// They are locked by this transaction; a mismatch is a bug.
		return nil, errors.New("cancelled fewer members than were locked")
	}
	return &ffdtype.CancelFlowResult{Policy: policy, Members: ids}, nil
}

// cancelled reports a flow that cannot be cancelled now: the stored result
// when it already is, an error when it finished otherwise.
func cancelled(f *ffdtype.Flow) (*ffdtype.CancelFlowResult, bool, error) {
	switch f.State {
	case ffdtype.FlowCancelled:
		return &ffdtype.CancelFlowResult{Policy: f.CancellationPolicy, Members: f.CancelledMembers, Repeated: true}, true, nil
	case ffdtype.FlowCompleted, ffdtype.FlowFailed:
		return nil, true, &ffdtype.AlreadyTerminalError{Object: "flow", ID: f.ID.String(), State: string(f.State)}
	}
	return nil, false, nil
}
