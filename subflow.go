package ffd

import (
	"context"
	"errors"

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
