package flows

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// AddResult is what AddExecution did.
type AddResult struct {
	NodeCount     int
	AlreadyMember bool // the execution was a member already; nothing changed
}

// AddExecution makes an existing execution a member of a flow
// (add_execution_to_flow). It is idempotent for the same flow; it refuses
// an execution of another flow (conflict), a terminal execution
// (AlreadyTerminalError: it could never finish the flow), a terminal flow,
// a missing flow or execution, and an execution minted on another
// partition than the flow's (members share the flow's partition).
func AddExecution(ctx context.Context, db store.DB, flowID uuid.UUID, id ident.ExecutionID) (*AddResult, error) {
	if err := leases.ValidateID("execution_id", id); err != nil {
		return nil, err
	}
	if part := ident.Partition(flowID); id.Partition != part {
		return nil, fault.Invalid(fault.KindNotMember, "execution_id", id.String(),
			fmt.Sprintf("minted on partition %d, but flow %s lives on partition %d; create members with the flow id so they are minted there", id.Partition, flowID, part))
	}
	var res *AddResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		var member *uuid.UUID
		var state string
		err := tx.QueryRow(ctx, `SELECT flow_id, state FROM ff_execution WHERE partition_key = $1 AND execution_id = $2 FOR NO KEY UPDATE`,
			id.Partition, id.UUID).Scan(&member, &state)
		if errors.Is(err, pgx.ErrNoRows) {
			return &fault.NotFoundError{Object: "execution", ID: id.String()}
		}
		if err != nil {
			return err
		}
		if member != nil && *member != flowID {
			return &fault.ConflictError{Object: "execution", ID: id.String(), Reason: "already a member of flow " + member.String(), Existing: *member}
		}
		f, err := openFlowForUpdate(ctx, tx, flowID)
		if err != nil {
			return err
		}
		if member != nil {
			res = &AddResult{NodeCount: f.NodeCount, AlreadyMember: true}
			return nil
		}
		// A finished execution would be a member that can never end the
		// flow: the flow finishes when its last live member ends, and this
		// one ended before it joined. Refuse rather than strand the flow.
		if store.State(state).Terminal() {
			return &fault.AlreadyTerminalError{Object: "execution", ID: id.String(), State: state}
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_execution SET flow_id = $3 WHERE partition_key = $1 AND execution_id = $2`,
			id.Partition, id.UUID, flowID); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `UPDATE ff_flow SET node_count = node_count + 1, graph_revision = graph_revision + 1,
			updated_at = now() WHERE partition_key = $1 AND flow_id = $2 RETURNING node_count`, f.Partition, flowID).Scan(&n); err != nil {
			return err
		}
		res = &AddResult{NodeCount: n}
		return nil
	})
	if err != nil {
		return nil, wrapOp("add execution "+id.String()+" to flow "+flowID.String(), err)
	}
	return res, nil
}

// CreateMember creates an execution minted on the flow's partition as a
// member of the flow, in one transaction.
func CreateMember(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID, p leases.CreateParams) (x *store.Execution, existed bool, err error) {
	part := ident.Partition(flowID)
	p.FlowID, p.Partition = &flowID, &part
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		if _, err := openFlowForUpdate(ctx, tx, flowID); err != nil {
			return err
		}
		x, existed, err = leases.Create(ctx, tx, lim, p)
		if err != nil {
			return err
		}
		if existed {
			if x.FlowID == nil || *x.FlowID != flowID {
				return &fault.ConflictError{Object: "execution", ID: x.ID.String(), Reason: "the idempotency key belongs to an execution outside this flow", Existing: x}
			}
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE ff_flow SET node_count = node_count + 1, graph_revision = graph_revision + 1,
			updated_at = now() WHERE partition_key = $1 AND flow_id = $2`, part, flowID)
		return err
	})
	if err != nil {
		return nil, false, wrapOp("create member of flow "+flowID.String(), err)
	}
	return x, existed, nil
}

// openFlowForUpdate locks an open flow (membership changes serialize on
// it) or says why it cannot change.
func openFlowForUpdate(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Flow, error) {
	f, err := scanFlow(tx.QueryRow(ctx, `SELECT `+flowColumns+` FROM ff_flow f
		WHERE f.partition_key = $1 AND f.flow_id = $2 FOR NO KEY UPDATE`, ident.Partition(id), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &fault.NotFoundError{Object: "flow", ID: id.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("lock flow %s: %w", id, err)
	}
	if f.State != store.FlowOpen {
		return nil, &fault.AlreadyTerminalError{Object: "flow", ID: id.String(), State: string(f.State)}
	}
	return f, nil
}

// wrapOp adds context to unexpected errors and leaves the typed ones
// (which already say what and why) as they are.
func wrapOp(what string, err error) error {
	var (
		ve *fault.ValidationError
		nf *fault.NotFoundError
		ce *fault.ConflictError
		se *fault.StaleRevisionError
		te *fault.AlreadyTerminalError
	)
	if errors.As(err, &ve) || errors.As(err, &nf) || errors.As(err, &ce) || errors.As(err, &se) || errors.As(err, &te) {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}
