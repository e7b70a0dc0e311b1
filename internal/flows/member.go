package flows

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// AddExecution makes an existing execution a member of a flow
// (add_execution_to_flow). It is idempotent for the same flow; it refuses
// an execution of another flow (conflict), a terminal execution
// (AlreadyTerminalError: it could never finish the flow), a terminal flow,
// a missing flow or execution, and an execution minted on another
// partition than the flow's (members share the flow's partition).
func AddExecution(ctx context.Context, db store.DB, flowID uuid.UUID, id ffdtype.ExecutionID) (*ffdtype.AddResult, error) {
	if err := leases.ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	if part := ident.Partition(flowID); id.Partition != part {
		return nil, fault.Invalid(ffdtype.KindNotMember, "execution_id", id.String(),
			fmt.Sprintf("minted on partition %d, but flow %s lives on partition %d; create members with the flow id so they are minted there", id.Partition, flowID, part))
	}
	var res *ffdtype.AddResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		locks := store.NewLocks(tx)
		m, err := locks.Execution(ctx, id)
		if errors.Is(err, pgx.ErrNoRows) {
			return &ffdtype.NotFoundError{Object: "execution", ID: id.String()}
		}
		if err != nil {
			return err
		}
		if m.FlowID != nil && *m.FlowID != flowID {
			return &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: "already a member of flow " + m.FlowID.String(), Existing: *m.FlowID}
		}
		f, err := lockOpenFlow(ctx, locks, flowID, store.ForUpdate)
		if err != nil {
			return err
		}
		if m.FlowID != nil {
			res = &ffdtype.AddResult{NodeCount: f.NodeCount, AlreadyMember: true}
			return nil
		}
		// A finished execution would be a member that can never end the
		// flow: the flow finishes when its last live member ends, and this
		// one ended before it joined. Refuse rather than strand the flow.
		if m.State.Terminal() {
			return &ffdtype.AlreadyTerminalError{Object: "execution", ID: id.String(), State: string(m.State)}
		}
		n, err := store.AddMember(ctx, tx, flowID, id)
		res = &ffdtype.AddResult{NodeCount: n}
		return err
	})
	if err != nil {
		return nil, wrapOp("add execution "+id.String()+" to flow "+flowID.String(), err)
	}
	return res, nil
}

// CreateMember creates an execution minted on the flow's partition as a
// member of the flow, in one transaction.
func CreateMember(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID, p ffdtype.CreateParams) (x *ffdtype.Execution, existed bool, err error) {
	part := ident.Partition(flowID)
	n, err := leases.Normalize(p, leases.Placement{FlowID: &flowID, Partition: &part}, lim)
	if err != nil {
		return nil, false, err
	}
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		f, err := lockOpenFlow(ctx, store.NewLocks(tx), flowID, store.ForUpdate)
		if err != nil {
			return err
		}
		if p.Version != f.Version {
			// A member runs under its flow's version.
			if err := memberVersion(&p, f.Version, p.Step); err != nil {
				return err
			}
			if n, err = leases.Normalize(p, leases.Placement{FlowID: &flowID, Partition: &part}, lim); err != nil {
				return err
			}
		}
		x, existed, err = leases.Insert(ctx, tx, n)
		if store.IsStepTaken(err) {
			return &ffdtype.ConflictError{Object: "step", ID: p.Step, Reason: "flow " + flowID.String() + " already has a member with this step name"}
		}
		if err != nil {
			return err
		}
		if existed {
			if x.FlowID == nil || *x.FlowID != flowID {
				return &ffdtype.ConflictError{Object: "execution", ID: x.ID.String(), Reason: "the idempotency key belongs to an execution outside this flow", Existing: x}
			}
			return nil
		}
		return store.CountNewMember(ctx, tx, flowID)
	})
	if err != nil {
		return nil, false, wrapOp("create member of flow "+flowID.String(), err)
	}
	return x, existed, nil
}

// wrapOp adds context to unexpected errors and leaves the typed ones
// (which already say what and why) as they are.
func wrapOp(what string, err error) error {
	var (
		ve *ffdtype.ValidationError
		nf *ffdtype.NotFoundError
		ce *ffdtype.ConflictError
		se *ffdtype.StaleRevisionError
		te *ffdtype.AlreadyTerminalError
	)
	if errors.As(err, &ve) || errors.As(err, &nf) || errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
