package ffdtype

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"
)

// FlowState is a flow's state.
type FlowState string

// Flow states.
const (
	// FlowOpen has members still to finish.
	FlowOpen FlowState = "open"
	// FlowCompleted, FlowFailed and FlowCancelled are terminal.
	FlowCompleted FlowState = "completed"
	FlowFailed    FlowState = "failed"
	FlowCancelled FlowState = "cancelled"
)

// Where a flow's compensations stand (Flow.Compensation).
const (
	// CompensationArmed: they run if the flow fails or is cancelled.
	CompensationArmed = "armed"
	// CompensationStarted: the flow failed or was cancelled and its
	// compensation flow was submitted.
	CompensationStarted = "started"
	// CompensationNotNeeded: the flow completed.
	CompensationNotNeeded = "not_needed"
)

// FlowStates lists every flow state.
var FlowStates = []FlowState{FlowOpen, FlowCompleted, FlowFailed, FlowCancelled}

// Flow is a DAG of executions (docs/flows.md).
type Flow struct {
	// ID is the flow's uuid; its members live on its partition.
	ID uuid.UUID
	// Partition is the partition of the flow and all its members.
	Partition int16
	// Namespace and Kind are the caller's labels.
	Namespace string
	Kind      string
	// State is the flow's state when read.
	State FlowState
	// GraphRevision counts graph changes; StageEdge compares and sets it.
	GraphRevision int64
	// NodeCount and EdgeCount are the flow's size.
	NodeCount int
	EdgeCount int
	// CancellationPolicy, CancelReason and CancelledMembers record a
	// cancelled flow's cancellation.
	CancellationPolicy CancelPolicy
	CancelReason       string
	CancelledMembers   []ExecutionID
	// Tags are free-form metadata.
	Tags map[string]any
	// CreatedAt, UpdatedAt and TerminalAt (nil while open) are the flow's
	// times.
	CreatedAt  time.Time
	UpdatedAt  time.Time
	TerminalAt *time.Time
	// RerunOf is the flow this one reruns (RerunFlow); nil otherwise.
	RerunOf *uuid.UUID
	// Parent is, for a sub-flow, the step of the parent flow whose body
	// it is; nil otherwise.
	Parent *ExecutionID
	// Version is the version of the handler set the flow runs under; ""
	// for none.
	Version string
	// Compensation is "" for a flow without compensations, else
	// CompensationArmed, CompensationStarted or CompensationNotNeeded;
	// CompensationFlow is the flow that runs them once started, and
	// CompensationOf, on that flow, the flow it compensates.
	Compensation     string
	CompensationFlow *uuid.UUID
	CompensationOf   *uuid.UUID
	// Groups is filled by DescribeFlow: every edge group, by downstream id.
	Groups []EdgeGroup
}

// Edge makes a downstream execution depend on an upstream one.
type Edge struct {
	// ID is the edge's uuid.
	ID uuid.UUID
	// FlowID is the flow both ends belong to.
	FlowID uuid.UUID
	// Upstream must finish before Downstream can run.
	Upstream   ExecutionID
	Downstream ExecutionID
	// DependencyKind and DataPassingRef are the caller's labels.
	DependencyKind string
	DataPassingRef string
	// State is staged, applied or resolved.
	State EdgeState
	// ResolvedOutcome is the upstream's outcome once resolved: success,
	// failed, cancelled, expired or skipped; "" before.
	ResolvedOutcome Outcome
	// CreatedAt, AppliedAt and ResolvedAt are the edge's times.
	CreatedAt  time.Time
	AppliedAt  *time.Time
	ResolvedAt *time.Time
}

// EdgeState is an edge's state.
type EdgeState string

// Edge states.
const (
	// EdgeStaged is in the flow's graph but not yet counted by its
	// downstream's group.
	EdgeStaged EdgeState = "staged"
	// EdgeApplied is counted and waits for its upstream to finish.
	EdgeApplied EdgeState = "applied"
	// EdgeResolved has its upstream's outcome.
	EdgeResolved EdgeState = "resolved"
)

// EdgeStates lists every edge state.
var EdgeStates = []EdgeState{EdgeStaged, EdgeApplied, EdgeResolved}

// EdgeGroup is a downstream's join state: policy, counters, decision.
type EdgeGroup struct {
	// FlowID is the flow of the group and its edges.
	FlowID uuid.UUID
	// Downstream is the execution the group gates.
	Downstream ExecutionID
	// Policy joins its incoming edges.
	Policy Policy
	// Counts are its applied and resolved edges.
	Counts Counts
	// Decision is pending until the policy is satisfied or impossible.
	Decision Decision
	// DecidedAt is when it decided; nil while pending.
	DecidedAt *time.Time
	// CancelMembers are the live siblings a satisfied cancel_remaining
	// group is about to cancel; empty once they are.
	CancelMembers []ExecutionID
}

// Unsatisfied is how many more successes the group needs (0 once it has
// them or has decided).
func (g EdgeGroup) Unsatisfied() int {
	if g.Decision != DecisionPending {
		return 0
	}
	need := g.Counts.Total
	switch g.Policy.Kind {
	case AnyOf:
		need = 1
	case Quorum:
		need = g.Policy.K
	}
	return max(0, need-g.Counts.Success)
}

// PolicyKind is all_of, any_of or quorum.
type PolicyKind string

// OnSatisfied says what happens to the remaining upstreams once an any_of
// or quorum group is satisfied.
type OnSatisfied string

// Join policies.
const (
	// AllOf is satisfied when every upstream succeeded.
	AllOf PolicyKind = "all_of"
	// AnyOf is satisfied when one upstream succeeded.
	AnyOf PolicyKind = "any_of"
	// Quorum is satisfied when K upstreams succeeded.
	Quorum PolicyKind = "quorum"

	// CancelRemaining cancels the upstreams still live.
	CancelRemaining OnSatisfied = "cancel_remaining"
	// LetRun lets them finish (the default).
	LetRun OnSatisfied = "let_run"
)

// Policy is a join policy.
type Policy struct {
	// Kind is all_of (the default), any_of or quorum.
	Kind PolicyKind
	// K is the quorum's size, 1..the number of incoming edges; quorum only.
	K int
	// OnSatisfied is any_of's and quorum's; default LetRun.
	OnSatisfied OnSatisfied
}

// PolicyKinds and OnSatisfieds list every join policy and every
// OnSatisfied value.
var (
	PolicyKinds  = []PolicyKind{AllOf, AnyOf, Quorum}
	OnSatisfieds = []OnSatisfied{CancelRemaining, LetRun}
)

// Decision is an edge group's decision.
type Decision string

// Decisions.
const (
	DecisionPending    Decision = "pending"
	DecisionSatisfied  Decision = "satisfied"
	DecisionImpossible Decision = "impossible"
)

// Decisions lists every decision.
var Decisions = []Decision{DecisionPending, DecisionSatisfied, DecisionImpossible}

// Counts are a group's edge counters.
type Counts struct {
	// Total is the number of applied edges into the downstream.
	Total int
	// Success, Fail and Skip count resolved edges by upstream outcome
	// (Fail also counts cancelled and expired upstreams).
	Success, Fail, Skip int
}

// CancelPolicy says which members CancelFlow cancels with the flow.
type CancelPolicy string

// Cancel policies.
const (
	// CancelFlowOnly cancels the flow and leaves its members to finish.
	CancelFlowOnly CancelPolicy = "flow_only"
	// CancelAll cancels every live member, fencing running ones.
	CancelAll CancelPolicy = "cancel_all"
	// CancelPending cancels blocked and pending members only.
	CancelPending CancelPolicy = "cancel_pending"
)

// CancelPolicies lists every cancel policy.
var CancelPolicies = []CancelPolicy{CancelFlowOnly, CancelAll, CancelPending}

// AddResult is what AddExecutionToFlow did.
type AddResult struct {
	// NodeCount is the flow's size after the call.
	NodeCount int
	// AlreadyMember is true when nothing changed.
	AlreadyMember bool
}

// StageResult is a staged edge and the flow's new graph revision.
type StageResult struct {
	// Edge is the staged edge; NewRevision the flow's graph revision after
	// the stage.
	Edge        *Edge
	NewRevision int64
}

// ApplyResult is what ApplyEdge did.
type ApplyResult struct {
	// AlreadyApplied is true when the edge was applied before: nothing
	// changed.
	AlreadyApplied bool
	// Unsatisfied is how many more upstream successes the group needs.
	Unsatisfied int
	// Resolved is true when the upstream had already finished, so the edge
	// resolved at once.
	Resolved bool
	// Group is the downstream's group after the call.
	Group EdgeGroup
}

// CancelFlowResult is what CancelFlow did (or did the first time).
type CancelFlowResult struct {
	// Policy is the policy the flow was cancelled under.
	Policy CancelPolicy
	// Members are the members the (first) call cancelled.
	Members []ExecutionID
	// Repeated is true when the flow was already cancelled: nothing was
	// written.
	Repeated bool
}

// FlowOutcome is a finished flow with every member as it ended.
type FlowOutcome struct {
	// Flow is the flow, in its terminal state, with its edge groups.
	Flow *Flow
	// Members are the flow's executions in creation order, with their
	// results.
	Members []*Execution
	// Steps are the members that have a step name, by name.
	Steps map[string]*Execution
}

// SubflowResult is a completed sub-flow step's result (JSON): its child
// flow, and the results of the child's last steps (those no edge leaves)
// by step name; a result that is not JSON is a JSON string of it. When
// they would pass the payload limit they are left out and Truncated
// says so.
type SubflowResult struct {
	Flow      uuid.UUID                  `json:"flow_id"`
	State     FlowState                  `json:"state"`
	Results   map[string]json.RawMessage `json:"results"`
	Truncated bool                       `json:"truncated,omitempty"`
}

// Failure is the payload (JSON) of a flow's on-failure step: the flow,
// how it ended, its members that did not complete, and the steps whose
// compensations run.
type Failure struct {
	Flow         uuid.UUID    `json:"flow_id"`
	State        FlowState    `json:"state"`
	Failed       []FailedStep `json:"failed"`
	Compensating []string     `json:"compensating"`
}

// FailedStep is a member of a failed or cancelled flow that did not
// complete.
type FailedStep struct {
	Step      string      `json:"step"`
	Execution ExecutionID `json:"execution_id"`
	State     State       `json:"state"`
	Error     string      `json:"error,omitempty"`
}
