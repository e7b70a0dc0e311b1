package ffd

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// ExecutionID is an execution's id, `{fp:N}:<uuid>` on the wire.
type ExecutionID = ident.ExecutionID

// ParseExecutionID parses the wire form; anything else is a
// *ValidationError quoting the input.
func ParseExecutionID(s string) (ExecutionID, error) {
	id, err := ident.ParseExecutionID(s)
	if err != nil {
		return ExecutionID{}, fault.Invalid(fault.KindMalformedID, "execution_id", s, "want {fp:N}:<uuid> with N in 0..255 and a lower-case hyphenated uuid")
	}
	return id, nil
}

// Execution is a snapshot of one execution.
type Execution = store.Execution

// State is an execution's state.
type State = store.State

// Execution states.
const (
	StateBlocked   = store.StateBlocked
	StatePending   = store.StatePending
	StateRunning   = store.StateRunning
	StateCompleted = store.StateCompleted
	StateFailed    = store.StateFailed
	StateCancelled = store.StateCancelled
	StateSkipped   = store.StateSkipped
	StateExpired   = store.StateExpired
)

// RetryPolicy is exponential backoff with a cap and jitter. Zero fields
// take the defaults: base 1 s, multiplier 2, max 5 min, jitter 0.1.
type RetryPolicy = store.RetryPolicy

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

// CreateParams describes a new execution. Only Lane is required.
type CreateParams struct {
	// Lane is the queue workers claim from: 1-128 of [A-Za-z0-9_.:-].
	Lane string
	// Namespace scopes idempotency keys. Default: the client's namespace.
	Namespace string
	// Kind is an application-defined type name, for handlers and queries.
	Kind string
	// Payload is the input, at most the client's MaxPayloadBytes.
	Payload []byte
	// JSON, when non-nil, is encoded as the payload (Payload must be empty).
	JSON any
	// Priority: higher is claimed first. Default 0.
	Priority int
	// RequiredCapabilities must all be among a worker's capabilities.
	RequiredCapabilities []string
	// MaxAttempts: default DefaultMaxAttempts; 1..1000.
	MaxAttempts int
	// Retry is the backoff between attempts.
	Retry RetryPolicy
	// LeaseTTL: a claim or heartbeat keeps the lease this long. Default
	// DefaultLeaseTTL; 1 s..24 h.
	LeaseTTL time.Duration
	// AttemptTimeout ends an attempt that runs longer, heartbeats or not.
	// Default 0: none.
	AttemptTimeout time.Duration
	// Deadline expires the execution if it has not finished this long after
	// creation. Default 0: none.
	Deadline time.Duration
	// Delay makes the execution claimable this long after creation.
	Delay time.Duration
	// IdempotencyKey: a second create with the same key in the namespace
	// returns the first execution instead of creating another.
	IdempotencyKey string
	// Tags are free-form metadata, stored as a JSON object.
	Tags map[string]any
}

func (p CreateParams) internal(c *Client) (leases.CreateParams, error) {
	payload := p.Payload
	if p.JSON != nil {
		if len(payload) > 0 {
			return leases.CreateParams{}, fault.Invalid(fault.KindInvalidValue, "payload", fmt.Sprintf("%d bytes", len(payload)), "set Payload or JSON, not both")
		}
		b, err := json.Marshal(p.JSON)
		if err != nil {
			return leases.CreateParams{}, fault.Invalid(fault.KindInvalidValue, "payload", fmt.Sprintf("%T", p.JSON), "JSON encoding failed: "+err.Error())
		}
		payload = b
	}
	ns := p.Namespace
	if ns == "" {
		ns = c.cfg.Namespace
	}
	return leases.CreateParams{
		Namespace: ns, Lane: p.Lane, Kind: p.Kind, Payload: payload, Priority: p.Priority,
		RequiredCapabilities: p.RequiredCapabilities, MaxAttempts: p.MaxAttempts, Retry: p.Retry,
		LeaseTTL: p.LeaseTTL, AttemptTimeout: p.AttemptTimeout, Deadline: p.Deadline, Delay: p.Delay,
		IdempotencyKey: p.IdempotencyKey, Tags: p.Tags,
	}, nil
}

// CreateResult is a created (or, by idempotency key, found) execution.
type CreateResult struct {
	Execution *Execution
	// Existed is true when the idempotency key was already used: nothing
	// was created and Execution is the earlier one.
	Existed bool
}

// ClaimParams asks for due executions of one lane.
type ClaimParams struct {
	Lane string
	// Worker identifies the claimer, "id/instance"; recorded on the lease.
	Worker string
	// Capabilities the claimer has.
	Capabilities []string
	// Max executions to claim at once, 1..1000. Default 1.
	Max int
}

// Outcome is what Complete, Fail and Cancel did.
type Outcome = leases.Outcome

// FailParams describes a failed attempt.
type FailParams = leases.FailParams

// Requeued is an execution put back to pending by Revoke.
type Requeued = store.Requeued

// ListParams filters List; zero fields do not filter.
type ListParams = leases.ListParams

// ListPage is one page of List; pass Next as the next call's After.
type ListPage = leases.ListPage
