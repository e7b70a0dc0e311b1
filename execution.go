package ffd

import (
	"context"

	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Defaults.
const (
	DefaultNamespace       = leases.DefaultNamespace
	DefaultMaxAttempts     = leases.DefaultMaxAttempts
	DefaultLeaseTTL        = leases.DefaultLeaseTTL
	DefaultMaxPayloadBytes = leases.DefaultMaxPayloadBytes
)

// Input limits, enforced with a ValidationError before anything is written.
const (
	// MaxMaxPayloadBytes is the largest Config.MaxPayloadBytes (64 MiB).
	MaxMaxPayloadBytes = leases.MaxMaxPayloadBytes
	// MaxErrorBytes bounds FailParams.Error. The Worker shortens longer
	// handler errors to fit.
	MaxErrorBytes = leases.MaxErrorBytes
	// MaxReasonBytes bounds a Cancel or Revoke reason.
	MaxReasonBytes = leases.MaxReasonBytes
	// MaxCancelledByBytes bounds Cancel's by.
	MaxCancelledByBytes = leases.MaxByBytes
	// MaxTagsBytes bounds CreateParams.Tags, encoded as JSON.
	MaxTagsBytes = leases.MaxTagsBytes
)

// own is p as this client creates it: in the client's namespace when p
// names none, carrying ctx's trace.
func (c *Client) own(ctx context.Context, p CreateParams) CreateParams {
	if p.Namespace == "" {
		p.Namespace = c.cfg.Namespace
	}
	c.tracing.inject(ctx, &p)
	return p
}

// CreateResult is a created (or, by idempotency key, found) execution.
type CreateResult struct {
	Execution *Execution
	// Existed is true when the idempotency key was already used, the
	// unique key is held, or the create folded into its debounce
	// window's execution: nothing was created and Execution is the
	// earlier one (for a trailing debounce, with this create's payload).
	Existed bool
	// Folds, for a debounced create, is how many creates the execution
	// now stands for, this one included: 1 when this create made it,
	// more when it folded into the window's execution (Existed). 0
	// without a debounce.
	Folds int64
}

// Attempts lists an execution's attempts, oldest first: who ran it, under
// which epoch, when, and how each ended.
func (c *Client) Attempts(ctx context.Context, id ExecutionID) ([]Attempt, error) {
	return store.ListAttempts(ctx, c.pool, id)
}
