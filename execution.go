package ffd

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/google/uuid"
)

// ExecutionID is an execution's id: the partition it lives on and its
// uuid. On the wire (String, JSON, the CLI) it reads `{fp:N}:<uuid>`.
type ExecutionID struct {
	// Partition is 0..255, the partition the execution's rows live on.
	Partition int16
	// UUID is the execution's uuid (version 7: ids sort by creation time).
	UUID uuid.UUID
}

// String is the wire form, `{fp:N}:<uuid>`.
func (id ExecutionID) String() string { return ident.ExecutionID(id).String() }

// IsZero reports the zero id.
func (id ExecutionID) IsZero() bool { return id == ExecutionID{} }

// MarshalText encodes the wire form.
func (id ExecutionID) MarshalText() ([]byte, error) { return ident.ExecutionID(id).MarshalText() }

// UnmarshalText decodes the wire form; anything else is a
// *ValidationError quoting the input.
func (id *ExecutionID) UnmarshalText(b []byte) error {
	parsed, err := ParseExecutionID(string(b))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// ParseExecutionID parses the wire form; anything else is a
// *ValidationError quoting the input.
func ParseExecutionID(s string) (ExecutionID, error) {
	id, err := ident.ParseExecutionID(s)
	if err != nil {
		return ExecutionID{}, fault.Invalid(fault.KindMalformedID, "execution_id", s, "want {fp:N}:<uuid> with N in 0..255 and a hyphenated uuid")
	}
	return ExecutionID(id), nil
}

// State is an execution's state (docs/design.md section 3).
type State string

// Execution states.
const (
	// StateBlocked waits for its upstream edges to decide.
	StateBlocked State = "blocked"
	// StatePending is claimable from its RunAt.
	StatePending State = "pending"
	// StateRunning is held by a worker under a lease.
	StateRunning State = "running"
	// StateCompleted, StateFailed, StateCancelled, StateSkipped and
	// StateExpired are terminal.
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	StateSkipped   State = "skipped"
	StateExpired   State = "expired"
)

// Terminal reports a final state.
func (s State) Terminal() bool { return store.State(s).Terminal() }

// Execution is a snapshot of one execution.
type Execution struct {
	// ID is the execution's id.
	ID ExecutionID
	// FlowID is the flow it belongs to; nil outside any flow.
	FlowID *uuid.UUID
	// Namespace scopes its idempotency key.
	Namespace string
	// Lane is the queue it is claimed from.
	Lane string
	// Kind is the application's type name for it.
	Kind string
	// Priority: higher is claimed first.
	Priority int
	// RequiredCapabilities must all be among a claiming worker's.
	RequiredCapabilities []string
	// State is its state when read.
	State State
	// RunAt is when it is (or was) claimable.
	RunAt time.Time
	// Attempt counts claims so far; 0 before the first.
	Attempt int
	// MaxAttempts bounds Attempt.
	MaxAttempts int
	// Retry is the backoff between attempts.
	Retry RetryPolicy
	// LeaseEpoch is the fencing token of the current (or last) lease;
	// Complete, Fail and Renew must quote it.
	LeaseEpoch int64
	// LeaseOwner is the worker holding (or that last held) the lease.
	LeaseOwner string
	// LeaseExpiresAt is when the current lease lapses; nil when not running.
	LeaseExpiresAt *time.Time
	// LeaseTTL is how long a claim or heartbeat keeps the lease.
	LeaseTTL time.Duration
	// AttemptTimeout ends an attempt that runs longer; 0: none.
	AttemptTimeout time.Duration
	// AttemptDeadlineAt is when the running attempt times out; nil: never.
	AttemptDeadlineAt *time.Time
	// DeadlineAt expires the execution if it has not finished by then.
	DeadlineAt *time.Time
	// Payload is the input.
	Payload []byte
	// Result is the output of a completed execution.
	Result []byte
	// LastError is the last failed attempt's error.
	LastError string
	// IdempotencyKey, when set, made its creation idempotent.
	IdempotencyKey string
	// CreatedAt is its creation time.
	CreatedAt time.Time
	// StartedAt is its first claim's time; nil before.
	StartedAt *time.Time
	// TerminalAt is when it reached a terminal state; nil before.
	TerminalAt *time.Time
	// CancellationReason and CancelledBy say why and by whom it was
	// cancelled.
	CancellationReason string
	CancelledBy        string
	// Tags are free-form metadata.
	Tags map[string]any
	// Step is a flow member's name in its flow (SubmitNode.Ref, or
	// CreateParams.Step); "" outside flows.
	Step string
	// RerunOf is the uuid of the execution this one reruns (RerunExecution,
	// RerunFlow); nil otherwise.
	RerunOf *uuid.UUID
}

// executionOf converts the store's row to the public snapshot.
func executionOf(x *store.Execution) *Execution {
	if x == nil {
		return nil
	}
	return &Execution{
		ID: ExecutionID(x.ID), FlowID: x.FlowID, Namespace: x.Namespace, Lane: x.Lane, Kind: x.Kind,
		Priority: x.Priority, RequiredCapabilities: x.RequiredCapabilities, State: State(x.State),
		RunAt: x.RunAt, Attempt: x.Attempt, MaxAttempts: x.MaxAttempts, Retry: RetryPolicy(x.Retry),
		LeaseEpoch: x.LeaseEpoch, LeaseOwner: x.LeaseOwner, LeaseExpiresAt: x.LeaseExpiresAt,
		LeaseTTL: x.LeaseTTL, AttemptTimeout: x.AttemptTimeout, AttemptDeadlineAt: x.AttemptDeadlineAt,
		DeadlineAt: x.DeadlineAt, Payload: x.Payload, Result: x.Result, LastError: x.LastError,
		IdempotencyKey: x.IdempotencyKey, CreatedAt: x.CreatedAt, StartedAt: x.StartedAt,
		TerminalAt: x.TerminalAt, CancellationReason: x.CancellationReason, CancelledBy: x.CancelledBy,
		Tags: x.Tags, Step: x.Step, RerunOf: x.RerunOf,
	}
}

func executionsOf(xs []*store.Execution) []*Execution {
	out := make([]*Execution, len(xs))
	for i, x := range xs {
		out[i] = executionOf(x)
	}
	return out
}

// RetryPolicy is exponential backoff with a cap and jitter: attempt n that
// fails waits min(Base·Multiplier^(n-1), Max), then ±Jitter of that.
type RetryPolicy struct {
	// Base is the first wait. Default 1 s.
	Base time.Duration
	// Max caps the wait. Default 5 min.
	Max time.Duration
	// Multiplier grows the wait per attempt. Default 2.
	Multiplier float64
	// Jitter is the random fraction added or taken away. Default 0.1.
	Jitter float64
}

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
		RequiredCapabilities: p.RequiredCapabilities, MaxAttempts: p.MaxAttempts, Retry: store.RetryPolicy(p.Retry),
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
type Outcome struct {
	// State after the call: completed, failed, cancelled, or pending when
	// a failure was retried.
	State State
	// Attempt is the attempt the call ended.
	Attempt int
	// Result is the stored result of a completed execution.
	Result []byte
	// RunAt is when a retried execution becomes claimable again.
	RunAt time.Time
	// Repeated is true when the call had already taken effect: nothing was
	// written this time and the stored outcome is returned.
	Repeated bool
	// EventID is the completion event this call wrote; 0 if none.
	EventID int64
}

func outcomeOf(o *leases.Outcome, err error) (*Outcome, error) {
	if err != nil {
		return nil, err
	}
	return &Outcome{State: State(o.State), Attempt: o.Attempt, Result: o.Result, RunAt: o.RunAt, Repeated: o.Repeated, EventID: o.EventID}, nil
}

// FailParams describes a failed attempt.
type FailParams struct {
	// Error is the attempt's error, at most MaxErrorBytes.
	Error string
	// Retryable retries when attempts remain; false ends the execution now.
	Retryable bool
	// Immediate makes a retry claimable at once instead of after backoff
	// (a worker shutting down hands its work back this way).
	Immediate bool
}

// Requeued is an execution put back to pending by Revoke.
type Requeued struct {
	// ID is the execution's id.
	ID ExecutionID
	// Attempt is the attempt the revoke ended.
	Attempt int
	// LeaseEpoch is the revoked lease's epoch.
	LeaseEpoch int64
	// RunAt is when it is claimable again.
	RunAt time.Time
}

// ListParams filters List; zero fields do not filter.
type ListParams struct {
	// Namespace, Lane, State and Kind select executions; empty: any.
	Namespace string
	Lane      string
	State     State
	Kind      string
	// FlowID selects a flow's members.
	FlowID *uuid.UUID
	// After is the cursor: the previous page's Next.
	After *ExecutionID
	// Limit is 1..1000; 0 means 100.
	Limit int
}

// ListPage is one page of List; pass Next as the next call's After.
type ListPage struct {
	// Executions in id (creation) order.
	Executions []*Execution
	// Next is nil on the last page.
	Next *ExecutionID
}

// Attempt is one claim of an execution and how it ended.
type Attempt struct {
	// Attempt numbers claims from 1.
	Attempt int
	// LeaseEpoch is the fencing token the attempt held.
	LeaseEpoch int64
	// Worker is the claiming worker ("ID/Instance").
	Worker string
	// StartedAt is the claim's time.
	StartedAt time.Time
	// EndedAt is when it ended; nil while it runs.
	EndedAt *time.Time
	// Outcome is succeeded, failed, timed_out, cancelled or revoked; ""
	// while it runs.
	Outcome string
	// Error is the failure's message, if any.
	Error string
}

// Attempts lists an execution's attempts, oldest first: who ran it, under
// which epoch, when, and how each ended.
func (c *Client) Attempts(ctx context.Context, id ExecutionID) ([]Attempt, error) {
	as, err := store.ListAttempts(ctx, c.pool, ident.ExecutionID(id))
	if err != nil {
		return nil, err
	}
	out := make([]Attempt, len(as))
	for i, a := range as {
		out[i] = Attempt{Attempt: a.Attempt, LeaseEpoch: a.LeaseEpoch, Worker: a.Worker, StartedAt: a.StartedAt, EndedAt: a.EndedAt}
		if a.Outcome != nil {
			out[i].Outcome = *a.Outcome
		}
		if a.Error != nil {
			out[i].Error = *a.Error
		}
	}
	return out, nil
}
