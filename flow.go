package ffd

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/store"
)

// Flow types; see docs/flows.md.
type (
	// Flow is a DAG of executions.
	Flow = store.Flow
	// FlowState is open, completed, failed or cancelled.
	FlowState = store.FlowState
	// Edge makes a downstream execution depend on an upstream one.
	Edge = store.Edge
	// EdgeGroup is a downstream's join state: policy, counters, decision.
	EdgeGroup = store.EdgeGroup
	// Policy is a join policy: all_of, any_of or quorum k, with on_satisfied.
	Policy = store.Policy
	// PolicyKind is all_of, any_of or quorum.
	PolicyKind = store.PolicyKind
	// OnSatisfied is cancel_remaining or let_run.
	OnSatisfied = store.OnSatisfied
	// Decision is pending, satisfied or impossible.
	Decision = store.Decision
	// Counts are a group's edge counters.
	Counts = store.Counts
	// CancelPolicy is flow_only, cancel_all or cancel_pending.
	CancelPolicy = store.CancelPolicy
	// CreateFlowParams describes a new flow (ID defaults to a fresh v7 uuid).
	CreateFlowParams = flows.CreateFlowParams
	// AddResult is what AddExecutionToFlow did.
	AddResult = flows.AddResult
	// StageEdgeParams describes an edge to stage.
	StageEdgeParams = flows.StageParams
	// StageResult is a staged edge and the flow's new graph revision.
	StageResult = flows.StageResult
	// ApplyResult is what ApplyEdge did.
	ApplyResult = flows.ApplyResult
	// CancelFlowResult is what CancelFlow did (or did the first time).
	CancelFlowResult = flows.CancelResult
	// ListFlowsParams pages through flows.
	ListFlowsParams = flows.ListParams
	// ListFlowsPage is one page of flows.
	ListFlowsPage = flows.ListPage
	// EdgeDirection selects incoming or outgoing edges.
	EdgeDirection = flows.Direction
)

// Flow constants.
const (
	FlowOpen      = store.FlowOpen
	FlowCompleted = store.FlowCompleted
	FlowFailed    = store.FlowFailed
	FlowCancelled = store.FlowCancelled

	AllOf  = store.AllOf
	AnyOf  = store.AnyOf
	Quorum = store.Quorum

	CancelRemaining = store.CancelRemaining
	LetRun          = store.LetRun

	DecisionPending    = store.Pending
	DecisionSatisfied  = store.Satisfied
	DecisionImpossible = store.Impossible

	CancelFlowOnly = store.CancelFlowOnly
	CancelAll      = store.CancelAll
	CancelPending  = store.CancelPending

	Incoming = flows.Incoming
	Outgoing = flows.Outgoing
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
	ip, err := p.internal(c)
	if err != nil {
		return nil, err
	}
	x, existed, err := flows.CreateMember(ctx, db, c.limits, flowID, ip)
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
	return flows.List(ctx, c.pool, p)
}

// ListFlowsTx is ListFlows inside tx.
func (c *Client) ListFlowsTx(ctx context.Context, tx pgx.Tx, p ListFlowsParams) (*ListFlowsPage, error) {
	return flows.List(ctx, tx, p)
}

// ListEdges lists the edges into or out of one member.
func (c *Client) ListEdges(ctx context.Context, flowID uuid.UUID, node ExecutionID, dir EdgeDirection) ([]*Edge, error) {
	return flows.ListEdges(ctx, c.pool, flowID, node, dir)
}

// ListEdgesTx is ListEdges inside tx.
func (c *Client) ListEdgesTx(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, node ExecutionID, dir EdgeDirection) ([]*Edge, error) {
	return flows.ListEdges(ctx, tx, flowID, node, dir)
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

// SubmitNode is one execution of a submitted DAG, named by Ref.
type SubmitNode struct {
	Ref    string
	Params CreateParams
	// Policy joins the node's incoming edges; default all_of.
	Policy *Policy
}

// SubmitEdge makes To depend on From.
type SubmitEdge = flows.SubmitEdge

// SubmitFlowParams is a whole DAG.
type SubmitFlowParams struct {
	Flow  CreateFlowParams
	Nodes []SubmitNode
	Edges []SubmitEdge
}

// SubmittedFlow is the created flow and its executions by Ref.
type SubmittedFlow = flows.Submitted

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
	return c.submitFlow(ctx, c.pool, p)
}

// SubmitFlowTx is SubmitFlow inside tx.
func (c *Client) SubmitFlowTx(ctx context.Context, tx pgx.Tx, p SubmitFlowParams) (*SubmittedFlow, error) {
	return c.submitFlow(ctx, tx, p)
}

func (c *Client) submitFlow(ctx context.Context, db store.DB, p SubmitFlowParams) (*SubmittedFlow, error) {
	if p.Flow.Namespace == "" {
		p.Flow.Namespace = c.cfg.Namespace
	}
	sp := flows.SubmitParams{Flow: p.Flow, Edges: p.Edges, Nodes: make([]flows.SubmitNode, len(p.Nodes))}
	for i, n := range p.Nodes {
		if n.Params.Namespace == "" {
			n.Params.Namespace = p.Flow.Namespace
		}
		ip, err := n.Params.internal(c)
		if err != nil {
			return nil, err
		}
		sp.Nodes[i] = flows.SubmitNode{Ref: n.Ref, Params: ip, Policy: n.Policy}
	}
	return flows.Submit(ctx, db, c.limits, sp)
}
