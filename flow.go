package ffd

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// EdgeDirection selects incoming or outgoing edges.
type EdgeDirection string

// Edge directions.
const (
	Incoming EdgeDirection = "incoming"
	Outgoing EdgeDirection = "outgoing"
)

// CreateFlowResult is a created flow, or the existing one of that id.
type CreateFlowResult struct {
	Flow          *Flow
	AlreadyExists bool
}

// CreateFlow creates an open flow; with an existing id it returns that
// flow and AlreadyExists.
func (c *Client) CreateFlow(ctx context.Context, p CreateFlowParams) (*CreateFlowResult, error) {
	return c.createFlow(ctx, c.pool, p)
}

// CreateFlowTx is CreateFlow inside tx.
func (c *Client) CreateFlowTx(ctx context.Context, tx pgx.Tx, p CreateFlowParams) (*CreateFlowResult, error) {
	return c.createFlow(ctx, tx, p)
}

func (c *Client) createFlow(ctx context.Context, db store.DB, p CreateFlowParams) (*CreateFlowResult, error) {
	if p.Namespace == "" {
		p.Namespace = c.cfg.Namespace
	}
	if p.OnFailure != nil {
		return nil, fault.Invalid(KindInvalidValue, "on_failure", p.OnFailure.Kind,
			"an on-failure step is given at SubmitFlow; to a flow built member by member, add it with AddCompensation(ctx, flow, OnFailureStep, params)")
	}
	f, exists, err := flows.CreateFlow(ctx, db, p)
	if err != nil {
		return nil, err
	}
	return &CreateFlowResult{Flow: f, AlreadyExists: exists}, nil
}

// CreateInFlow creates an execution as a member of flowID, minted on the
// flow's partition, in one transaction. Add edges to it with StageEdge and
// ApplyEdge (before its upstreams can finish), or use SubmitFlow.
func (c *Client) CreateInFlow(ctx context.Context, flowID uuid.UUID, p CreateParams) (*CreateResult, error) {
	return c.createInFlow(ctx, c.pool, flowID, p)
}

// CreateInFlowTx is CreateInFlow inside tx.
func (c *Client) CreateInFlowTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, p CreateParams) (*CreateResult, error) {
	return c.createInFlow(ctx, tx, flowID, p)
}

func (c *Client) createInFlow(ctx context.Context, db store.DB, flowID uuid.UUID, p CreateParams) (*CreateResult, error) {
	x, existed, err := flows.CreateMember(ctx, db, c.limits, flowID, c.own(ctx, p))
	if err != nil {
		return nil, err
	}
	return &CreateResult{Execution: x, Existed: existed}, nil
}

// AddExecutionToFlow makes an existing execution (minted on the flow's
// partition) a member; idempotent for the same flow.
func (c *Client) AddExecutionToFlow(ctx context.Context, flowID uuid.UUID, id ExecutionID) (*AddResult, error) {
	return flows.AddExecution(ctx, c.pool, flowID, id)
}

// AddExecutionToFlowTx is AddExecutionToFlow inside tx.
func (c *Client) AddExecutionToFlowTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, id ExecutionID) (*AddResult, error) {
	return flows.AddExecution(ctx, tx, flowID, id)
}

// StageEdge stages a dependency edge, compare-and-set on the flow's graph
// revision; it refuses self edges, non-members, duplicates, terminal flows
// and cycles.
func (c *Client) StageEdge(ctx context.Context, p StageEdgeParams) (*StageResult, error) {
	return flows.Stage(ctx, c.pool, p)
}

// StageEdgeTx is StageEdge inside tx.
func (c *Client) StageEdgeTx(ctx context.Context, tx pgx.Tx, p StageEdgeParams) (*StageResult, error) {
	return flows.Stage(ctx, tx, p)
}

// ApplyEdge counts a staged edge into its downstream's group and blocks
// the downstream; it resolves at once if the upstream already finished.
func (c *Client) ApplyEdge(ctx context.Context, flowID, edgeID uuid.UUID) (*ApplyResult, error) {
	return flows.Apply(ctx, c.pool, flowID, edgeID)
}

// ApplyEdgeTx is ApplyEdge inside tx.
func (c *Client) ApplyEdgeTx(ctx context.Context, tx pgx.Tx, flowID, edgeID uuid.UUID) (*ApplyResult, error) {
	return flows.Apply(ctx, tx, flowID, edgeID)
}

// SetEdgeGroupPolicy sets a downstream's join policy before its first
// edge is staged; restating the same policy is a no-op (alreadySet).
func (c *Client) SetEdgeGroupPolicy(ctx context.Context, flowID uuid.UUID, downstream ExecutionID, p Policy) (alreadySet bool, err error) {
	return flows.SetPolicy(ctx, c.pool, flowID, downstream, p)
}

// SetEdgeGroupPolicyTx is SetEdgeGroupPolicy inside tx.
func (c *Client) SetEdgeGroupPolicyTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, downstream ExecutionID, p Policy) (bool, error) {
	return flows.SetPolicy(ctx, tx, flowID, downstream, p)
}

// DescribeFlow reads a flow with its edge groups.
func (c *Client) DescribeFlow(ctx context.Context, flowID uuid.UUID) (*Flow, error) {
	return flows.Describe(ctx, c.pool, flowID)
}

// DescribeFlowTx is DescribeFlow inside tx.
func (c *Client) DescribeFlowTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID) (*Flow, error) {
	return flows.Describe(ctx, tx, flowID)
}

// ListFlows pages through flows in creation order.
func (c *Client) ListFlows(ctx context.Context, p ListFlowsParams) (*ListFlowsPage, error) {
	return listFlows(ctx, c.pool, p)
}

// ListFlowsTx is ListFlows inside tx.
func (c *Client) ListFlowsTx(ctx context.Context, tx pgx.Tx, p ListFlowsParams) (*ListFlowsPage, error) {
	return listFlows(ctx, tx, p)
}

// FlowEdges lists every edge of a flow (staged, applied and resolved), by
// edge id.
func (c *Client) FlowEdges(ctx context.Context, flowID uuid.UUID) ([]*Edge, error) {
	return store.FlowEdges(ctx, c.pool, flowID)
}

// ListEdges lists the edges into or out of one member.
func (c *Client) ListEdges(ctx context.Context, flowID uuid.UUID, node ExecutionID, dir EdgeDirection) ([]*Edge, error) {
	return flows.ListEdges(ctx, c.pool, flowID, node, flows.Direction(dir))
}

// ListEdgesTx is ListEdges inside tx.
func (c *Client) ListEdgesTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, node ExecutionID, dir EdgeDirection) ([]*Edge, error) {
	return flows.ListEdges(ctx, tx, flowID, node, flows.Direction(dir))
}

// DescribeEdge reads one edge.
func (c *Client) DescribeEdge(ctx context.Context, flowID, edgeID uuid.UUID) (*Edge, error) {
	return flows.DescribeEdge(ctx, c.pool, flowID, edgeID)
}

// DescribeEdgeTx is DescribeEdge inside tx.
func (c *Client) DescribeEdgeTx(ctx context.Context, tx pgx.Tx, flowID, edgeID uuid.UUID) (*Edge, error) {
	return flows.DescribeEdge(ctx, tx, flowID, edgeID)
}

// CancelFlow cancels a flow under policy; a repeat returns the stored
// policy and members.
func (c *Client) CancelFlow(ctx context.Context, flowID uuid.UUID, policy CancelPolicy, reason string) (*CancelFlowResult, error) {
	return flows.Cancel(ctx, c.pool, flowID, policy, reason)
}

// CancelFlowTx is CancelFlow inside tx.
func (c *Client) CancelFlowTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, policy CancelPolicy, reason string) (*CancelFlowResult, error) {
	return flows.Cancel(ctx, tx, flowID, policy, reason)
}

// Bounds of one SubmitFlow.
const (
	MaxSubmitNodes = flows.MaxSubmitNodes // 100,000
	MaxSubmitEdges = flows.MaxSubmitEdges // 200,000
)

// SubmitFlow creates a flow, its executions, edges and policies in one
// transaction; roots start pending, the rest blocked. Any invalid part
// rejects the whole submission and writes nothing; so does a DAG over
// MaxSubmitNodes nodes or MaxSubmitEdges edges.
func (c *Client) SubmitFlow(ctx context.Context, p SubmitFlowParams) (*SubmittedFlow, error) {
	sub, err := c.submitFlow(ctx, c.pool, p)
	if err == nil && c.stall.due(time.Now()) {
		c.stall.check(ctx, c)
	}
	return sub, err
}

// SubmitFlowTx is SubmitFlow inside tx.
func (c *Client) SubmitFlowTx(ctx context.Context, tx pgx.Tx, p SubmitFlowParams) (*SubmittedFlow, error) {
	return c.submitFlow(ctx, tx, p)
}

func (c *Client) submitFlow(ctx context.Context, db store.DB, p SubmitFlowParams) (*SubmittedFlow, error) {
	sp := c.inNamespace(p)
	for i := range sp.Nodes {
		c.tracing.inject(ctx, &sp.Nodes[i].Params)
	}
	return flows.Submit(ctx, db, c.limits, sp)
}

// inNamespace is p with the client's namespace where the flow names none,
// and the flow's where a node names none; its nodes are p's copied, so
// that what the call sets on them is not the caller's to see.
func (c *Client) inNamespace(p SubmitFlowParams) SubmitFlowParams {
	if p.Flow.Namespace == "" {
		p.Flow.Namespace = c.cfg.Namespace
	}
	p.Nodes = slices.Clone(p.Nodes)
	for i := range p.Nodes {
		if p.Nodes[i].Params.Namespace == "" {
			p.Nodes[i].Params.Namespace = p.Flow.Namespace
		}
	}
	return p
}

// RerunFlow reruns a failed or cancelled flow as a new flow (its RerunOf
// names the old one) with the same steps, edges and policies. Steps that
// completed are carried over, completed at once with their old results
// and never run again; every other step (failed, expired, skipped,
// cancelled) runs again, and the graph unblocks as it would have. The old
// flow and its history stay readable. A flow is rerun at most once: a
// second call is a *ConflictError whose Existing is the rerun (rerun that
// one to try again); an open or completed flow is a *ConflictError too.
func (c *Client) RerunFlow(ctx context.Context, flowID uuid.UUID) (*SubmittedFlow, error) {
	return flows.RerunFlow(ctx, c.pool, c.limits, flowID)
}

// RerunExecution creates a new execution from a failed, expired or
// cancelled solo execution's parameters (not its idempotency key); its
// RerunOf names the old one, which stays as it ended. It is a
// *ConflictError for a live or completed execution, a flow member (rerun
// its flow), or a second rerun of the same execution.
func (c *Client) RerunExecution(ctx context.Context, id ExecutionID) (*Execution, error) {
	return leases.Rerun(ctx, c.pool, c.limits, id)
}

func listFlows(ctx context.Context, db store.DB, p ListFlowsParams) (*ListFlowsPage, error) {
	return flows.List(ctx, db, p)
}
