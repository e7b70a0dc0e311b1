package flows

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Attribution of members cancelled with their flow.
const (
	FlowCancelReason = "flow_cancelled"
	FlowCancelledBy  = "cancel_flow"
)

// CancelResult is what cancel_flow did, or did the first time.
type CancelResult struct {
	Policy store.CancelPolicy
	// Members cancelled by the call (by the first call, on a repeat).
	Members []ident.ExecutionID
	// Repeated is true when the flow was already cancelled: nothing was
	// written and the stored policy and members are returned.
	Repeated bool
}

// Cancel cancels a flow (cancel_flow). Every member it cancels goes
// through store.Terminate (completion event `cancelled`; a running member
// is fenced with lease event `revoked`). The flow writes its own
// `cancelled` completion event. Idempotent: a repeat returns the stored
// policy and members; a completed or failed flow is already terminal.
func Cancel(ctx context.Context, db store.DB, flowID uuid.UUID, policy store.CancelPolicy, reason string) (*CancelResult, error) {
	var states []string
	switch policy {
	case store.CancelFlowOnly:
	case store.CancelAll:
		states = []string{"blocked", "pending", "running"}
	case store.CancelPending:
		states = []string{"blocked", "pending"}
	default:
		return nil, fault.Invalid(fault.KindInvalidValue, "policy", string(policy), "want flow_only, cancel_all or cancel_pending")
	}
	if reason == "" {
		reason = FlowCancelReason
	}
	part := ident.Partition(flowID)
	var res *CancelResult
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		f, err := Get(ctx, tx, flowID)
		if err != nil {
			return err
		}
		if r, done, err := cancelled(f); done {
			res = r
			return err
		}
		// Lock order: members (by id), then the flow.
		var members []uuid.UUID
		if len(states) > 0 {
			rows, err := tx.Query(ctx, `SELECT execution_id FROM ff_execution
				WHERE partition_key = $1 AND flow_id = $2 AND state = ANY($3)
				ORDER BY partition_key, execution_id FOR NO KEY UPDATE`, part, flowID, states)
			if err != nil {
				return err
			}
			if members, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
				return err
			}
		}
		f, err = scanFlow(tx.QueryRow(ctx, `SELECT `+flowColumns+` FROM ff_flow f
			WHERE f.partition_key = $1 AND f.flow_id = $2 FOR NO KEY UPDATE`, part, flowID))
		if err != nil {
			return err
		}
		if r, done, err := cancelled(f); done {
			res = r
			return err
		}
		if members == nil {
			members = []uuid.UUID{}
		}
		if _, err := tx.Exec(ctx, `WITH f AS (
				UPDATE ff_flow SET state = 'cancelled', cancellation_policy = $3, cancel_reason = $4,
					cancelled_members = $5, terminal_at = now(), updated_at = now()
				WHERE partition_key = $1 AND flow_id = $2
				RETURNING partition_key, flow_id, namespace)
			INSERT INTO ff_completion_event (partition_key, flow_id, outcome, namespace, dispatched_at)
			SELECT partition_key, flow_id, 'cancelled', namespace, now() FROM f`,
			part, flowID, string(policy), reason, members); err != nil {
			return err
		}
		ends := make([]store.Ending, len(members))
		for i, m := range members {
			ends[i] = store.Ending{ID: ident.ExecutionID{Partition: part, UUID: m}, State: store.StateCancelled, Reason: reason, By: FlowCancelledBy}
		}
		ended, err := store.Terminate(ctx, tx, ends)
		if err != nil {
			return err
		}
		if len(ended) != len(members) {
			// They are locked by this transaction; a mismatch is a bug.
			return errors.New("cancelled fewer members than were locked")
		}
		res = &CancelResult{Policy: policy, Members: idsOn(part, members)}
		return nil
	})
	if err != nil {
		return nil, wrapOp("cancel flow "+flowID.String(), err)
	}
	return res, nil
}

// cancelled reports a flow that cannot be cancelled now: the stored result
// when it already is, an error when it finished otherwise.
func cancelled(f *Flow) (*CancelResult, bool, error) {
	switch f.State {
	case store.FlowCancelled:
		return &CancelResult{Policy: f.CancellationPolicy, Members: f.CancelledMembers, Repeated: true}, true, nil
	case store.FlowCompleted, store.FlowFailed:
		return nil, true, &fault.AlreadyTerminalError{Object: "flow", ID: f.ID.String(), State: string(f.State)}
	}
	return nil, false, nil
}
