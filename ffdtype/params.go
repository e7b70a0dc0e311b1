package ffdtype

import "github.com/google/uuid"

// The parameters of the calls whose machinery takes them as the caller
// gave them; the ones the API reads and turns into something else first
// (CreateParams, SubmitFlowParams) are package ffd's.

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
