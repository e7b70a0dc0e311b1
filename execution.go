package ffd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
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
	// returns the first execution instead of creating another, forever
	// (until retention deletes it).
	IdempotencyKey string
	// UniqueKey makes the create unique by key in the namespace for a
	// while: as long as an execution with the key is live (blocked,
	// pending or running) when UniqueWindow is 0, or within the current
	// window of UniqueWindow (windows are aligned to the Unix epoch). A
	// refused create returns the holder with Existed = true. At most 512
	// bytes; not with IdempotencyKey, not in CreateMany or SubmitFlow.
	UniqueKey string
	// UniqueWindow is 0 (unique while live) or 1 s..366 days.
	UniqueWindow time.Duration
	// Tags are free-form metadata, stored as a JSON object.
	Tags map[string]any
	// Step names a flow member within its flow (at most 128 bytes, unique
	// in the flow: a taken name is a *ConflictError). Only for
	// CreateInFlow; SubmitFlow sets it to each node's Ref.
	Step string
}

func (p CreateParams) internal(c *Client) (leases.CreateParams, error) {
	payload := p.Payload
	if p.JSON != nil {
		if len(payload) > 0 {
			return leases.CreateParams{}, fault.Invalid(ffdtype.KindInvalidValue, "payload", fmt.Sprintf("%d bytes", len(payload)), "set Payload or JSON, not both")
		}
		b, err := json.Marshal(p.JSON)
		if err != nil {
			return leases.CreateParams{}, fault.Invalid(ffdtype.KindInvalidValue, "payload", fmt.Sprintf("%T", p.JSON), "JSON encoding failed: "+err.Error())
		}
		payload = b
	}
	ns := p.Namespace
	if ns == "" {
		ns = c.cfg.Namespace
	}
	return leases.CreateParams{
		Namespace: ns, Lane: p.Lane, Kind: p.Kind, Payload: payload, Priority: p.Priority,
		RequiredCapabilities: p.RequiredCapabilities, MaxAttempts: p.MaxAttempts, Retry: ffdtype.RetryPolicy(p.Retry),
		LeaseTTL: p.LeaseTTL, AttemptTimeout: p.AttemptTimeout, Deadline: p.Deadline, Delay: p.Delay,
		IdempotencyKey: p.IdempotencyKey, Tags: p.Tags, Step: p.Step,
		UniqueKey: p.UniqueKey, UniqueWindow: p.UniqueWindow,
	}, nil
}

// CreateResult is a created (or, by idempotency key, found) execution.
type CreateResult struct {
	Execution *Execution
	// Existed is true when the idempotency key was already used, or the
	// unique key is held: nothing was created and Execution is the
	// earlier one.
	Existed bool
}

// Attempts lists an execution's attempts, oldest first: who ran it, under
// which epoch, when, and how each ended.
func (c *Client) Attempts(ctx context.Context, id ExecutionID) ([]Attempt, error) {
	return store.ListAttempts(ctx, c.pool, id)
}
