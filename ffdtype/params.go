package ffdtype

import (
	"time"

	"github.com/google/uuid"
)

// The parameters of the API's calls, as callers give them; the machinery
// takes them as they are and normalizes each once (defaults filled,
// every field checked) before anything is written.

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

// CreateFlowParams describes a new flow.
type CreateFlowParams struct {
	// ID: default a fresh v7 uuid. Creating an existing id again is
	// idempotent and reports AlreadyExists.
	ID uuid.UUID
	// Namespace: default the client's.
	Namespace string
	// Kind is a free label.
	Kind string
	// Tags are free-form metadata, a JSON object.
	Tags map[string]any
	// Version is the version of the handler set the flow runs under; its
	// members, the ones spawned later, its sub-flows and its
	// compensations take it (CreateParams.Version). Default "":
	// unversioned.
	Version string
	// OnFailure, when set, is a step that runs once if the flow fails or
	// is cancelled, with the failure as its payload (docs/workflows.md,
	// "Compensation"); its own Payload must be empty. Only in SubmitFlow.
	OnFailure *CreateParams
}

// ListFlowsParams pages through flows; zero fields do not filter.
type ListFlowsParams struct {
	Namespace string
	State     FlowState
	// After is the cursor: the previous page's Next.
	After *uuid.UUID
	// Limit is 1..1000; 0 means 100.
	Limit int
}

// ListFlowsPage is one page of flows; Next is nil on the last.
type ListFlowsPage struct {
	Flows []*Flow
	Next  *uuid.UUID
}

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
	// ConcurrencyKey groups executions of the lane for flow control
	// (docs/flow-control.md): a lane's keys take turns at the claim, and
	// a key may limit how many of its executions run at once and how
	// often they start. 1-256 bytes, no control characters; default "":
	// none.
	ConcurrencyKey string
	// ConcurrencyLimit, when positive, sets the key's running limit (as
	// SetKey does) when the execution is created: at most this many
	// executions of the key run at once, across every worker. 0 leaves
	// the key's limit as it is (none for a new key). Needs
	// ConcurrencyKey; at most MaxKeyLimit.
	ConcurrencyLimit int
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
	// Debounce, when set, folds the creates of one key within a window
	// into one execution (docs/intake.md, "Debounce"). A folded create
	// returns the execution it joined with Existed = true. Not with
	// IdempotencyKey, UniqueKey or Delay; not in CreateMany or flows.
	Debounce *Debounce
	// Tags are free-form metadata, stored as a JSON object.
	Tags map[string]any
	// Step names a flow member within its flow (at most 128 bytes, unique
	// in the flow: a taken name is a *ConflictError). Only for
	// CreateInFlow; SubmitFlow sets it to each node's Ref.
	Step string
	// Version is the version of the handler set the execution runs under
	// (docs/workflows.md, "Versions"): only workers that serve it claim
	// it. It must have been announced (a worker's WorkerConfig.Versions,
	// or AnnounceVersion); an unknown one is a *ValidationError (kind
	// unknown_version) and writes nothing. 1-64 of [A-Za-z0-9_.:+-];
	// default "": unversioned, claimed by any worker. A flow's members
	// take the flow's version and may not name another.
	Version string
}

// SubmitNode is one execution of a submitted DAG, named by Ref.
type SubmitNode struct {
	Ref    string
	Params CreateParams
	// Policy joins the node's incoming edges; default all_of.
	Policy *Policy
	// Flow, when set, makes the node a sub-flow step: its body is this
	// flow, started on the parent's partition when the step may run,
	// and the step ends as the child flow ends (docs/workflows.md,
	// "Sub-flows"). Params then carries only what a step itself has:
	// MaxAttempts 1, no lane (the engine runs it), Deadline, Priority,
	// Tags. The child takes the parent's namespace and version.
	Flow *SubmitFlowParams
	// Compensate, when set, is the step that undoes this one: it runs if
	// the flow fails or is cancelled after this step completed, in
	// reverse dependency order with the other compensations
	// (docs/workflows.md, "Compensation").
	Compensate *CreateParams
}

// SubmitEdge makes To depend on From.
type SubmitEdge struct {
	// From and To are node Refs.
	From, To string
	// DependencyKind: default "success_only".
	DependencyKind string
	// DataPassingRef is a free reference.
	DataPassingRef string
}

// SubmitFlowParams is a whole DAG.
type SubmitFlowParams struct {
	Flow  CreateFlowParams
	Nodes []SubmitNode
	Edges []SubmitEdge
}

// StageEdgeParams describes an edge to stage.
type StageEdgeParams struct {
	// FlowID is the flow of both ends.
	FlowID uuid.UUID
	// EdgeID: default a fresh v7 uuid.
	EdgeID uuid.UUID
	// Upstream must finish before Downstream can run.
	Upstream   ExecutionID
	Downstream ExecutionID
	// ExpectedRevision is the flow's GraphRevision the caller saw; the
	// stage fails with a *StaleRevisionError when it moved on.
	ExpectedRevision int64
	// DependencyKind: default "success_only"; at most 64 bytes.
	DependencyKind string
	// DataPassingRef: a free reference, at most 1024 bytes.
	DataPassingRef string
}

// SubmittedFlow is the created flow and its executions by Ref.
type SubmittedFlow struct {
	Flow       *Flow
	Executions map[string]*Execution
}

// SuspendParams is the wait a running attempt ends in (Client.Suspend;
// a handler returns Sleep, SleepUntil or WaitForSignal instead). Set For
// or Until for a sleep; Signal (with an optional Timeout) for a signal
// wait.
type SuspendParams struct {
	// For sleeps this long from now (the database's clock): 1ms..366
	// days.
	For time.Duration
	// Until sleeps until this time; a time past resumes at once.
	Until time.Time
	// Signal waits for a signal of this name, sent to the execution or
	// its flow: [A-Za-z0-9_.:-]{1,128}.
	Signal string
	// Timeout ends a signal wait without its signal after this long:
	// 0 (none, the default) or 1ms..366 days.
	Timeout time.Duration
}

// Suspended is a wait recorded by Client.Suspend.
type Suspended struct {
	// Attempt is the attempt that ended in the wait.
	Attempt int
	// RunAt is when the execution becomes claimable again by itself; the
	// zero time for a signal wait without timeout.
	RunAt time.Time
	// Woken is true when a signal sent before the wait began ended it at
	// once: the execution is claimable now.
	Woken bool
}

// SignalParams is a signal to send (Client.Signal): to a flow, or to an
// execution. Set exactly one of FlowID and Execution.
type SignalParams struct {
	// FlowID sends it to a flow: the first member that waits for Name
	// takes it (or the first that will).
	FlowID *uuid.UUID
	// Execution sends it to one execution.
	Execution *ExecutionID
	// Name is what a wait matches: [A-Za-z0-9_.:-]{1,128}.
	Name string
	// Payload is handed to the step it wakes (Wake.Received.Payload);
	// bounded like an execution's payload. JSON, when set, is encoded
	// into Payload instead.
	Payload []byte
	JSON    any
}

// SignalResult is a signal sent.
type SignalResult struct {
	Signal Signal
	// Woke is the execution whose wait it ended at once; nil when none
	// waited for it yet (the first wait for its name to come takes it).
	Woke *ExecutionID
}

// SpawnParams are steps a running flow member adds to its own flow as it
// completes (Job.Spawn, Client.CompleteAndSpawn): new nodes, and edges
// between them or from them into steps of the flow that have not
// started yet.
type SpawnParams struct {
	// Nodes are the new steps; each Ref is the step's name, unique in
	// the flow. A node without incoming edges starts at once (its
	// spawner completes with the spawn); one with edges waits for them
	// under its Policy (default all_of).
	Nodes []SubmitNode
	// Edges make To depend on From. From is a new node; To is a new node,
	// or an existing step of the flow that is blocked on its own
	// upstreams and not yet decided: its join then waits for the new
	// edges too (its policy is kept; a quorum's k is not raised).
	Edges []SubmitEdge
}

// Spawned is what a spawn added: the new executions by ref.
type Spawned struct {
	Executions map[string]*Execution
}

// DebounceMode says which create of a window runs.
type DebounceMode string

// Debounce modes.
const (
	// DebounceTrailing (the default) runs once the key has been quiet for
	// the window, with the last create's payload: each create within
	// the window replaces the payload and restarts the wait, up to
	// MaxWait after the first.
	DebounceTrailing DebounceMode = "trailing"
	// DebounceLeading runs the first create at once; the creates within
	// the window after it fold into it, its payload kept.
	DebounceLeading DebounceMode = "leading"
)

// Debounce folds many creates of one key into one execution per window.
type Debounce struct {
	// Key names what is debounced, in the namespace: 1-512 bytes, no
	// control characters.
	Key string
	// Window: 1 ms..366 days. Trailing: the quiet time before the
	// execution runs. Leading: how long after the first create the
	// others fold into it.
	Window time.Duration
	// Mode: DebounceTrailing by default.
	Mode DebounceMode
	// MaxWait bounds a trailing window: the execution runs at most this
	// long after the window's first create, however busy the key. 0:
	// no bound; else at least Window. Trailing only.
	MaxWait time.Duration
}
