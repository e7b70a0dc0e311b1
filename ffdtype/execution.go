package ffdtype

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
)

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

// States lists every execution state.
var States = []State{StateBlocked, StatePending, StateRunning, StateCompleted, StateFailed, StateCancelled, StateSkipped, StateExpired}

// Terminal reports a final state.
func (s State) Terminal() bool {
	switch s {
	case StateCompleted, StateFailed, StateCancelled, StateSkipped, StateExpired:
		return true
	}
	return false
}

// Valid reports whether s is one of the states.
func (s State) Valid() bool {
	return s.Terminal() || s == StateBlocked || s == StatePending || s == StateRunning
}

// Outcome is how an execution or a flow ended, as its completion event
// (ff_completion_event.outcome) and a resolved edge (Edge.ResolvedOutcome)
// say it.
type Outcome string

// Outcomes of executions (every terminal state, with completed reported
// as success) and of flows (OutcomeCompleted, and the shared
// OutcomeFailed and OutcomeCancelled).
const (
	OutcomeSuccess   Outcome = "success"
	OutcomeFailed    Outcome = "failed"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeExpired   Outcome = "expired"
	OutcomeSkipped   Outcome = "skipped"
	OutcomeCompleted Outcome = "completed"
)

// ExecutionOutcomes and FlowOutcomes list the outcomes of each kind of
// completion event.
var (
	ExecutionOutcomes = []Outcome{OutcomeSuccess, OutcomeFailed, OutcomeCancelled, OutcomeExpired, OutcomeSkipped}
	FlowOutcomes      = []Outcome{OutcomeCompleted, OutcomeFailed, OutcomeCancelled}
)

// OutcomeOf is the outcome of an execution that ended in s: the state
// itself, except that completed is reported as success. It is "" for a
// state that is not terminal.
func OutcomeOf(s State) Outcome {
	switch {
	case s == StateCompleted:
		return OutcomeSuccess
	case s.Terminal():
		return Outcome(s)
	}
	return ""
}

// AttemptOutcome is how one attempt ended (ff_attempt.outcome).
type AttemptOutcome string

// Attempt outcomes.
const (
	AttemptSucceeded AttemptOutcome = "succeeded"
	AttemptFailed    AttemptOutcome = "failed"
	AttemptTimedOut  AttemptOutcome = "timed_out"
	AttemptCancelled AttemptOutcome = "cancelled"
	AttemptRevoked   AttemptOutcome = "revoked"
	// AttemptWaited: the attempt ended in a wait (a sleep or a signal
	// wait); it does not count against max_attempts.
	AttemptWaited AttemptOutcome = "waited"
)

// AttemptOutcomes lists every attempt outcome.
var AttemptOutcomes = []AttemptOutcome{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptCancelled, AttemptRevoked, AttemptWaited}

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
	// Version is the version of the handler set it runs under
	// (CreateParams.Version); "" for none. It is held as the capability
	// VersionCapability(Version) among RequiredCapabilities, which only
	// workers serving the version have.
	Version string
	// RerunOf is the uuid of the execution this one reruns (RerunExecution,
	// RerunFlow); nil otherwise.
	RerunOf *uuid.UUID
	// ConcurrencyKey is the key it is claimed under (docs/flow-control.md);
	// "": none.
	ConcurrencyKey string
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

// Ending is what Complete, Fail and Cancel did: the state they left the
// execution in. (An Outcome is how an execution ended, as its completion
// event says.)
type Ending struct {
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
	// Outcome is how it ended; "" while it runs.
	Outcome AttemptOutcome
	// Error is the failure's message, if any.
	Error string
}

// Upstream is one step this job's step depends on, as it stands when read.
type Upstream struct {
	// Step is the upstream's step name ("" for a member added without one).
	Step string
	// ID is the upstream's execution.
	ID ExecutionID
	// State is its state: completed for the ones that satisfied the join;
	// with any_of, quorum or let_run others may be failed, cancelled or
	// still running.
	State State
	// Result is its result (completed upstreams only). It is JSON as the
	// upstream's handler returned it (HandleBytes results excepted), and
	// typed json.RawMessage so that forwarding it inside a value that is
	// marshalled again (a typed handler's output, a new payload) embeds
	// it as JSON, not as a base64 string. Decode reads it into a value.
	Result json.RawMessage
}

// Decode unmarshals the upstream's JSON result into v.
func (u Upstream) Decode(v any) error {
	if len(u.Result) == 0 {
		return fmt.Errorf("upstream %s (%s) has no result", u.Step, u.ID)
	}
	if err := json.Unmarshal(u.Result, v); err != nil {
		return fmt.Errorf("decode the result of upstream %s (%s) as %T: %w", u.Step, u.ID, v, err)
	}
	return nil
}

// WakeReason is how a wait ended (Wake.Reason).
type WakeReason string

// Wake reasons.
const (
	// WokenByTimer: the sleep's time came.
	WokenByTimer WakeReason = "timer"
	// WokenBySignal: the signal waited for was sent (Wake.Received).
	WokenBySignal WakeReason = "signal"
	// WokenByTimeout: the signal wait's timeout passed first.
	WokenByTimeout WakeReason = "timeout"
)

// Wake is what an execution last waited for (Job.Wake, Client.Wake) and
// how that wait ended. Attempts after the wait read it, retries
// included, until the next wait replaces it.
type Wake struct {
	// For is "sleep" or "signal".
	For string
	// Signal is the name waited for; "" for a sleep.
	Signal string
	// Until is when the wait ends by itself: the sleep's end, or the
	// signal wait's timeout; nil for a signal wait without one.
	Until *time.Time
	// Attempt is the attempt that ended in the wait.
	Attempt int
	// Waits counts every wait of the execution so far.
	Waits int
	// Waiting is true while the wait lasts (the execution is pending at
	// the attempt that began it); Reason is then "".
	Waiting bool
	// Reason is how the wait ended.
	Reason WakeReason
	// Received is the signal that ended it, with its payload.
	Received *Signal
}

// Signal is a named message with a payload, sent to a flow or an
// execution (Client.Signal), kept until one wait for its name takes it.
type Signal struct {
	// ID is the signal's uuid (version 7: sending order).
	ID uuid.UUID
	// Name is what waits match: [A-Za-z0-9_.:-]{1,128}.
	Name string
	// Payload is the sender's bytes.
	Payload []byte
	// SentAt is when it was sent (the database's clock).
	SentAt time.Time
	// FlowID is the flow it was sent to, or the flow of the execution it
	// was sent to; nil for a solo execution's.
	FlowID *uuid.UUID
	// Execution is the execution it was sent to; nil when sent to a flow.
	Execution *ExecutionID
	// ConsumedBy is the execution whose wait it ended, ConsumedAt when;
	// nil while it is kept for a wait to come.
	ConsumedBy *ExecutionID
	ConsumedAt *time.Time
}

// VersionCapabilityPrefix starts the capability that carries an
// execution's version.
const VersionCapabilityPrefix = "ffd.version:"

// VersionCapability is the capability a worker serving version v has,
// and an execution of version v requires.
func VersionCapability(v string) string { return VersionCapabilityPrefix + v }

// VersionOf is the version a set of required capabilities carries, ""
// for none.
func VersionOf(caps []string) string {
	for _, c := range caps {
		if len(c) > len(VersionCapabilityPrefix) && c[:len(VersionCapabilityPrefix)] == VersionCapabilityPrefix {
			return c[len(VersionCapabilityPrefix):]
		}
	}
	return ""
}
