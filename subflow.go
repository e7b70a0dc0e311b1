package ffd

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// ChildFlow reads the child flow of a sub-flow step (SubmitNode.Flow):
// nil while the step has not started it. A step that is no sub-flow step
// is a *ValidationError (kind not_member); an unknown id a
// *NotFoundError. A child's Flow.Parent leads back to its step.
func (c *Client) ChildFlow(ctx context.Context, step ExecutionID) (*Flow, error) {
	if err := leases.ValidateID("execution_id", step); err != nil {
		return nil, err
	}
	s, err := store.GetSubflow(ctx, c.pool, step)
	if errors.Is(err, pgx.ErrNoRows) {
		if _, gerr := c.Get(ctx, step); gerr != nil {
			return nil, gerr
		}
		return nil, &ValidationError{Kind: KindNotMember, Field: "execution_id", Value: step.String(), Detail: "not a sub-flow step"}
	}
	if err != nil {
		return nil, err
	}
	if s.Child == nil {
		return nil, nil
	}
	return c.DescribeFlow(ctx, *s.Child)
}

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
