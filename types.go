package ffd

import (
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/store"
)

// The rows the API hands out, the vocabulary they are written in and
// execution ids are declared once, in package ffdtype, which the store
// below the API builds directly; these names are the same types (see
// ffdtype for their fields), so that a program needs only this package.
type (
	ExecutionID    = ffdtype.ExecutionID
	Execution      = ffdtype.Execution
	RetryPolicy    = ffdtype.RetryPolicy
	State          = ffdtype.State
	Outcome        = ffdtype.Outcome
	Ending         = ffdtype.Ending
	Requeued       = ffdtype.Requeued
	Attempt        = ffdtype.Attempt
	AttemptOutcome = ffdtype.AttemptOutcome
	Upstream       = ffdtype.Upstream
	Flow           = ffdtype.Flow
	FlowOutcome    = ffdtype.FlowOutcome
	SubflowResult  = ffdtype.SubflowResult
	Failure        = ffdtype.Failure
	FailedStep     = ffdtype.FailedStep
	Wake           = ffdtype.Wake
	WakeReason     = ffdtype.WakeReason
	Signal         = ffdtype.Signal
	SuspendParams  = ffdtype.SuspendParams
	Suspended      = ffdtype.Suspended
	SignalParams   = ffdtype.SignalParams
	SignalResult   = ffdtype.SignalResult
	SpawnParams    = ffdtype.SpawnParams
	Spawned        = ffdtype.Spawned
	FlowState      = ffdtype.FlowState
	CancelPolicy   = ffdtype.CancelPolicy
	Edge           = ffdtype.Edge
	EdgeState      = ffdtype.EdgeState
	EdgeGroup      = ffdtype.EdgeGroup
	Policy         = ffdtype.Policy
	PolicyKind     = ffdtype.PolicyKind
	OnSatisfied    = ffdtype.OnSatisfied
	Decision       = ffdtype.Decision
	Counts         = ffdtype.Counts
	Lane           = ffdtype.Lane
	Rate           = ffdtype.Rate
	Key            = ffdtype.Key
	KeyOrder       = ffdtype.KeyOrder
	Debounce       = ffdtype.Debounce
	DebounceMode   = ffdtype.DebounceMode
)

// Key orders (KeyParams.Order, Key.Order).
const (
	OrderFair   = ffdtype.OrderFair
	OrderStrict = ffdtype.OrderStrict
)

// Debounce modes (Debounce.Mode).
const (
	DebounceTrailing = ffdtype.DebounceTrailing
	DebounceLeading  = ffdtype.DebounceLeading
)

// Execution states (docs/design.md section 3).
const (
	StateBlocked   = ffdtype.StateBlocked
	StatePending   = ffdtype.StatePending
	StateRunning   = ffdtype.StateRunning
	StateCompleted = ffdtype.StateCompleted
	StateFailed    = ffdtype.StateFailed
	StateCancelled = ffdtype.StateCancelled
	StateSkipped   = ffdtype.StateSkipped
	StateExpired   = ffdtype.StateExpired
)

// Outcomes: how an execution or a flow ended (completion events,
// resolved edges).
const (
	OutcomeSuccess   = ffdtype.OutcomeSuccess
	OutcomeFailed    = ffdtype.OutcomeFailed
	OutcomeCancelled = ffdtype.OutcomeCancelled
	OutcomeExpired   = ffdtype.OutcomeExpired
	OutcomeSkipped   = ffdtype.OutcomeSkipped
	OutcomeCompleted = ffdtype.OutcomeCompleted
)

// Attempt outcomes: how one attempt ended.
const (
	AttemptSucceeded = ffdtype.AttemptSucceeded
	AttemptFailed    = ffdtype.AttemptFailed
	AttemptTimedOut  = ffdtype.AttemptTimedOut
	AttemptCancelled = ffdtype.AttemptCancelled
	AttemptRevoked   = ffdtype.AttemptRevoked
	AttemptWaited    = ffdtype.AttemptWaited
)

// Wake reasons (Wake.Reason).
const (
	WokenByTimer   = ffdtype.WokenByTimer
	WokenBySignal  = ffdtype.WokenBySignal
	WokenByTimeout = ffdtype.WokenByTimeout
)

// Flow states.
const (
	FlowOpen      = ffdtype.FlowOpen
	FlowCompleted = ffdtype.FlowCompleted
	FlowFailed    = ffdtype.FlowFailed
	FlowCancelled = ffdtype.FlowCancelled
)

// Where a flow's compensations stand (Flow.Compensation).
const (
	CompensationArmed     = ffdtype.CompensationArmed
	CompensationStarted   = ffdtype.CompensationStarted
	CompensationNotNeeded = ffdtype.CompensationNotNeeded
)

// Names the engine gives: the lane of sub-flow steps (the daemon starts
// them; no worker claims from it), the step of a flow's on-failure step
// in its compensation flow, and the kind of compensation flows.
const (
	SubflowLane      = store.SubflowLane
	OnFailureStep    = flows.OnFailureStep
	CompensationKind = flows.CompensationKind
	MaxSubflowDepth  = flows.MaxSubflowDepth
)

// Cancel policies (CancelFlow).
const (
	CancelFlowOnly = ffdtype.CancelFlowOnly
	CancelAll      = ffdtype.CancelAll
	CancelPending  = ffdtype.CancelPending
)

// Edge states.
const (
	EdgeStaged   = ffdtype.EdgeStaged
	EdgeApplied  = ffdtype.EdgeApplied
	EdgeResolved = ffdtype.EdgeResolved
)

// Join policies and what satisfied any_of and quorum groups do with the
// upstreams still live.
const (
	AllOf           = ffdtype.AllOf
	AnyOf           = ffdtype.AnyOf
	Quorum          = ffdtype.Quorum
	CancelRemaining = ffdtype.CancelRemaining
	LetRun          = ffdtype.LetRun
)

// Edge group decisions.
const (
	DecisionPending    = ffdtype.DecisionPending
	DecisionSatisfied  = ffdtype.DecisionSatisfied
	DecisionImpossible = ffdtype.DecisionImpossible
)

// ParseExecutionID parses the wire form `{fp:N}:<uuid>`; anything else is
// a *ValidationError quoting the input.
func ParseExecutionID(s string) (ExecutionID, error) { return ffdtype.ParseExecutionID(s) }

// What the flow-building calls did.
type (
	AddResult        = ffdtype.AddResult
	StageResult      = ffdtype.StageResult
	ApplyResult      = ffdtype.ApplyResult
	CancelFlowResult = ffdtype.CancelFlowResult
)

// Parameters the machinery takes as they are, and the pages it returns.
type (
	ClaimParams      = ffdtype.ClaimParams
	FailParams       = ffdtype.FailParams
	ListParams       = ffdtype.ListParams
	ListPage         = ffdtype.ListPage
	CreateFlowParams = ffdtype.CreateFlowParams
	ListFlowsParams  = ffdtype.ListFlowsParams
	ListFlowsPage    = ffdtype.ListFlowsPage
	CreateParams     = ffdtype.CreateParams
	SubmitNode       = ffdtype.SubmitNode
	SubmitEdge       = ffdtype.SubmitEdge
	SubmitFlowParams = ffdtype.SubmitFlowParams
	StageEdgeParams  = ffdtype.StageEdgeParams
	SubmittedFlow    = ffdtype.SubmittedFlow
)

// The outbox: streams, events, cursors and named consumers.
type (
	OutboxStream   = ffdtype.OutboxStream
	OutboxEvent    = ffdtype.OutboxEvent
	OutboxCursor   = ffdtype.OutboxCursor
	OutboxStart    = ffdtype.OutboxStart
	OutboxConsumer = ffdtype.OutboxConsumer
	OutboxHandler  = ffdtype.OutboxHandler
	WALHandler     = ffdtype.WALHandler
	WALConfig      = ffdtype.WALConfig
)

// Outbox streams, and where a new consumer starts.
const (
	StreamCompletion = ffdtype.StreamCompletion
	StreamLease      = ffdtype.StreamLease
	StreamAll        = ffdtype.StreamAll
	FromStart        = ffdtype.FromStart
	FromNow          = ffdtype.FromNow
)

// Schedules and their missed-tick policies.
type (
	Schedule     = ffdtype.Schedule
	MissedPolicy = ffdtype.MissedPolicy
)

// Missed-tick policies.
const (
	MissedLatest = ffdtype.MissedLatest
	MissedSkip   = ffdtype.MissedSkip
	MissedAll    = ffdtype.MissedAll
)
