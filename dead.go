package ffd

import (
	"context"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
)

// Dead letters (docs/intake.md, "Dead letters").
type (
	DeadLetterFilter = ffdtype.DeadLetterFilter
	ListDeadParams   = ffdtype.ListDeadParams
	RerunDeadParams  = ffdtype.RerunDeadParams
	DeadRerun        = ffdtype.DeadRerun
)

// Bulk rerun bounds (RerunDeadParams.Limit).
const (
	DefaultDeadRerun = leases.DefaultDeadRerun
	MaxDeadRerun     = leases.MaxDeadRerun
)

// ListDeadLetters pages through dead letters, in creation order: solo
// executions that ended failed or expired (their attempts spent, failed
// for good, or past their deadline) and have not been rerun. Each carries
// its last error and attempt count; Get and Attempts read the rest.
func (c *Client) ListDeadLetters(ctx context.Context, p ListDeadParams) (*ListPage, error) {
	return leases.ListDead(ctx, c.pool, p)
}

// RerunDeadLetters runs the dead letters p selects again, each as a new
// execution from its parameters (as RerunExecution does one), up to
// p.Limit in one call. With p.DryRun it returns the selection and writes
// nothing. Bad input is a *ValidationError; an id that is not a dead
// letter (running, completed, a flow member, rerun already) is a
// *ConflictError; neither writes anything. Each dead letter is rerun
// once, however many calls race.
func (c *Client) RerunDeadLetters(ctx context.Context, p RerunDeadParams) (*DeadRerun, error) {
	return leases.RerunDead(ctx, c.pool, c.limits, p)
}
