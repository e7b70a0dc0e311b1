package store

// The schema's vocabulary, defined once. Each set below is exactly the set
// a CHECK constraint allows (names_test.go compares them with a migrated
// database), and the mappings between them (OutcomeOf, AttemptOutcomeOf,
// LeaseEndOf) are computed here and passed to SQL as parameters, so no
// statement spells a mapping of its own.

// State is an execution's state (ff_execution.state).
type State string

// Execution states (docs/design.md section 3).
const (
	StateBlocked   State = "blocked"
	StatePending   State = "pending"
	StateRunning   State = "running"
	StateCompleted State = "completed"
	StateFailed    State = "failed"
	StateCancelled State = "cancelled"
	StateSkipped   State = "skipped"
	StateExpired   State = "expired"
)

// States lists every execution state.
var States = []State{StateBlocked, StatePending, StateRunning, StateCompleted, StateFailed, StateCancelled, StateSkipped, StateExpired}

// Terminal reports whether s is final.
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

// Outcome is a completion event's outcome (ff_completion_event.outcome,
// ff_edge.resolved_outcome).
type Outcome string

// Outcomes of executions, and of flows (OutcomeCompleted, and the shared
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
// event.
var (
	ExecutionOutcomes = []Outcome{OutcomeSuccess, OutcomeFailed, OutcomeCancelled, OutcomeExpired, OutcomeSkipped}
	FlowOutcomes      = []Outcome{OutcomeCompleted, OutcomeFailed, OutcomeCancelled}
)

// OutcomeOf is the completion outcome of an execution that ended in s: the
// state itself, except that completed is reported as success. It is ""
// for a state that is not terminal.
func OutcomeOf(s State) Outcome {
	switch {
	case s == StateCompleted:
		return OutcomeSuccess
	case s.Terminal():
		return Outcome(s)
	}
	return ""
}

// AttemptOutcome is how an attempt ended (ff_attempt.outcome).
type AttemptOutcome string

// Attempt outcomes.
const (
	AttemptSucceeded AttemptOutcome = "succeeded"
	AttemptFailed    AttemptOutcome = "failed"
	AttemptTimedOut  AttemptOutcome = "timed_out"
	AttemptCancelled AttemptOutcome = "cancelled"
	AttemptRevoked   AttemptOutcome = "revoked"
)

// AttemptOutcomes lists every attempt outcome.
var AttemptOutcomes = []AttemptOutcome{AttemptSucceeded, AttemptFailed, AttemptTimedOut, AttemptCancelled, AttemptRevoked}

// AttemptOutcomeOf is how the running attempt of an execution that ended
// in s ends: a lease taken away by expiry (or a skip, which never meets a
// running attempt) times the attempt out. Since migration 00018 that
// attempt stays on the execution row and the view ff_attempt_all spells
// this mapping out in SQL; TestHeldAttemptsReadAsTheMappingSays keeps the
// two equal.
func AttemptOutcomeOf(s State) AttemptOutcome {
	switch s {
	case StateCompleted:
		return AttemptSucceeded
	case StateFailed:
		return AttemptFailed
	case StateCancelled:
		return AttemptCancelled
	}
	return AttemptTimedOut
}

// LeaseEventType is a lease event's type (ff_lease_event.event_type).
type LeaseEventType string

// Lease event types.
const (
	LeaseAcquired LeaseEventType = "acquired"
	LeaseRenewed  LeaseEventType = "renewed"
	LeaseReleased LeaseEventType = "released"
	LeaseExpired  LeaseEventType = "expired"
	LeaseRevoked  LeaseEventType = "revoked"
)

// LeaseEventTypes lists every lease event type.
var LeaseEventTypes = []LeaseEventType{LeaseAcquired, LeaseRenewed, LeaseReleased, LeaseExpired, LeaseRevoked}

// LeaseEndOf is the lease event of a running execution that ended in s:
// its holder released it (complete, fail), the engine revoked it
// (cancel), or it lapsed (expiry).
func LeaseEndOf(s State) LeaseEventType {
	switch s {
	case StateCancelled:
		return LeaseRevoked
	case StateExpired:
		return LeaseExpired
	}
	return LeaseReleased
}

// FlowState is a flow's state (ff_flow.state).
type FlowState string

// Flow states.
const (
	FlowOpen      FlowState = "open"
	FlowCompleted FlowState = "completed"
	FlowFailed    FlowState = "failed"
	FlowCancelled FlowState = "cancelled"
)

// FlowStates lists every flow state.
var FlowStates = []FlowState{FlowOpen, FlowCompleted, FlowFailed, FlowCancelled}

// CancelPolicy is how cancel_flow treats members (ff_flow.cancellation_policy).
type CancelPolicy string

// Cancel policies.
const (
	// CancelFlowOnly cancels the flow alone: members are untouched, and no
	// members or edges can be added any more.
	CancelFlowOnly CancelPolicy = "flow_only"
	// CancelAll cancels every non-terminal member; running ones are fenced.
	CancelAll CancelPolicy = "cancel_all"
	// CancelPending cancels members not yet running; running ones finish.
	CancelPending CancelPolicy = "cancel_pending"
)

// CancelPolicies lists every cancel policy.
var CancelPolicies = []CancelPolicy{CancelFlowOnly, CancelAll, CancelPending}

// EdgeState is an edge's state (ff_edge.state).
type EdgeState string

// Edge states.
const (
	EdgeStaged   EdgeState = "staged"
	EdgeApplied  EdgeState = "applied"
	EdgeResolved EdgeState = "resolved"
)

// EdgeStates lists every edge state.
var EdgeStates = []EdgeState{EdgeStaged, EdgeApplied, EdgeResolved}

// PolicyKind is a join policy (ff_edge_group.policy).
type PolicyKind string

// Join policies (docs/design.md section 5).
const (
	AllOf  PolicyKind = "all_of"
	AnyOf  PolicyKind = "any_of"
	Quorum PolicyKind = "quorum"
)

// PolicyKinds lists every join policy.
var PolicyKinds = []PolicyKind{AllOf, AnyOf, Quorum}

// OnSatisfied says what happens to the other upstreams once a group is
// satisfied (ff_edge_group.on_satisfied).
type OnSatisfied string

// OnSatisfied values.
const (
	CancelRemaining OnSatisfied = "cancel_remaining"
	LetRun          OnSatisfied = "let_run"
)

// OnSatisfieds lists every OnSatisfied value.
var OnSatisfieds = []OnSatisfied{CancelRemaining, LetRun}

// Decision is an edge group's decision (ff_edge_group.decision).
type Decision string

// Decisions.
const (
	Pending    Decision = "pending"
	Satisfied  Decision = "satisfied"
	Impossible Decision = "impossible"
)

// Decisions lists every decision.
var Decisions = []Decision{Pending, Satisfied, Impossible}

// Stream selects an outbox (ff_outbox_consumer.stream).
type Stream string

// Streams.
const (
	StreamCompletion Stream = "completion"
	StreamLease      Stream = "lease"
	StreamAll        Stream = "all"
)

// Streams lists every stream.
var Streams = []Stream{StreamCompletion, StreamLease, StreamAll}

// Notification channels the schema's triggers send on (docs/schema.md,
// Notifications). Payloads are hints: nothing relies on one arriving.
const (
	// ChannelCompletion carries a statement's completion event id range.
	ChannelCompletion = "ff_completion"
	// ChannelLease carries a statement's lease event id range, or
	// DuePrefix and a time (Unix milliseconds) at which executions put back
	// to pending for later come due (a retry after backoff).
	ChannelLease = "ff_lease"
	// ChannelReady carries a lane that has work due.
	ChannelReady = "ff_ready"
	// ChannelRevoke carries partition:execution_id:epoch of a running lease
	// taken away (cancel, revoke, expiry).
	ChannelRevoke = "ff_revoke"
)

// DuePrefix starts a ChannelLease payload that names a due time rather
// than event ids.
const DuePrefix = "due:"

// Channels lists every channel.
var Channels = []string{ChannelCompletion, ChannelLease, ChannelReady, ChannelRevoke}
