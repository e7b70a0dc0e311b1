package ffd

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Compensation reads the compensation flow of a flow whose compensations
// started (Flow.Compensation is CompensationStarted), with its
// executions by step: each compensated step's name, and OnFailureStep.
// It is nil for a flow whose compensations did not start (none, armed,
// or not needed).
func (c *Client) Compensation(ctx context.Context, flowID uuid.UUID) (*SubmittedFlow, error) {
	f, err := c.DescribeFlow(ctx, flowID)
	if err != nil || f.CompensationFlow == nil {
		return nil, err
	}
	cf, err := c.DescribeFlow(ctx, *f.CompensationFlow)
	if err != nil {
		return nil, err
	}
	xs, err := store.FlowMembers(ctx, c.pool, cf.ID)
	if err != nil {
		return nil, err
	}
	out := &SubmittedFlow{Flow: cf, Executions: make(map[string]*Execution, len(xs))}
	for _, x := range xs {
		out.Executions[x.Step] = x
	}
	return out, nil
}

// AddCompensation gives a step of an open flow built member by member
// (CreateInFlow) the step that undoes it, as SubmitNode.Compensate does
// at submission; with step OnFailureStep it sets the flow's on-failure
// step (CreateFlowParams.OnFailure), whose payload must be empty. A step
// the flow does not have is a *ValidationError; a step that has a
// compensation already a *ConflictError; a finished flow an
// *AlreadyTerminalError. Nothing is written then.
func (c *Client) AddCompensation(ctx context.Context, flowID uuid.UUID, step string, p CreateParams) error {
	return flows.AddCompensation(ctx, c.pool, c.limits, flowID, step, p)
}

// AddCompensationTx is AddCompensation inside tx.
func (c *Client) AddCompensationTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, step string, p CreateParams) error {
	return flows.AddCompensation(ctx, tx, c.limits, flowID, step, p)
}

// WaitCompensation blocks until a flow has finished and, when it failed
// or was cancelled with compensations, until its compensation flow has
// ended too, and returns that flow with its steps by name: each
// compensated step's compensation, and OnFailureStep. It is nil for a
// flow that needed none (completed, or without compensations).
func (c *Client) WaitCompensation(ctx context.Context, flowID uuid.UUID) (*FlowOutcome, error) {
	var f *Flow
	err := c.waitFor(ctx, ident.Partition(flowID), func(ctx context.Context) (bool, error) {
		var err error
		if f, err = flows.Get(ctx, c.pool, flowID); err != nil {
			return false, err
		}
		return f.State != FlowOpen && f.Compensation != CompensationArmed, nil
	})
	if err != nil {
		return nil, fmt.Errorf("wait for the compensation of flow %s: %w", flowID, err)
	}
	if f.CompensationFlow == nil {
		return nil, nil
	}
	return c.WaitFlow(ctx, *f.CompensationFlow)
}
