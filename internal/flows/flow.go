package flows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Flow is one flow row, with its edge groups when described.
type Flow struct {
	ID                 uuid.UUID
	Partition          int16
	Namespace          string
	Kind               string
	State              store.FlowState
	GraphRevision      int64
	NodeCount          int
	EdgeCount          int
	CancellationPolicy store.CancelPolicy
	CancelReason       string
	CancelledMembers   []ident.ExecutionID
	Tags               map[string]any
	CreatedAt          time.Time
	UpdatedAt          time.Time
	TerminalAt         *time.Time
	// Groups is filled by Describe: every edge group, by downstream id.
	Groups []EdgeGroup
}

// EdgeGroup is a downstream's join state.
type EdgeGroup struct {
	Downstream    ident.ExecutionID
	Policy        Policy
	Counts        Counts
	Decision      store.Decision
	DecidedAt     *time.Time
	CancelMembers []ident.ExecutionID
}

// Unsatisfied is how many more successes the group needs (0 once it has
// them or has decided).
func (g EdgeGroup) Unsatisfied() int {
	if g.Decision != store.Pending {
		return 0
	}
	need := g.Counts.Total
	switch g.Policy.Kind {
	case store.AnyOf:
		need = 1
	case store.Quorum:
		need = g.Policy.K
	}
	return max(0, need-g.Counts.Success)
}

const flowColumns = `f.partition_key, f.flow_id, f.namespace, f.kind, f.state, f.graph_revision, f.node_count,
	f.edge_count, coalesce(f.cancellation_policy, ''), coalesce(f.cancel_reason, ''), f.cancelled_members, f.tags,
	f.created_at, f.updated_at, f.terminal_at`

func scanFlow(row pgx.Row) (*Flow, error) {
	var f Flow
	var members []uuid.UUID
	var state, policy string
	err := row.Scan(&f.Partition, &f.ID, &f.Namespace, &f.Kind, &state, &f.GraphRevision, &f.NodeCount,
		&f.EdgeCount, &policy, &f.CancelReason, &members, &f.Tags, &f.CreatedAt, &f.UpdatedAt, &f.TerminalAt)
	if err != nil {
		return nil, err
	}
	f.State, f.CancellationPolicy = store.FlowState(state), store.CancelPolicy(policy)
	f.CancelledMembers = idsOn(f.Partition, members)
	return &f, nil
}

func idsOn(part int16, us []uuid.UUID) []ident.ExecutionID {
	out := make([]ident.ExecutionID, len(us))
	for i, u := range us {
		out[i] = ident.ExecutionID{Partition: part, UUID: u}
	}
	return out
}

// CreateFlowParams describes a new flow.
type CreateFlowParams struct {
	// ID: default a fresh v7 uuid. Creating an existing id again is
	// idempotent and reports AlreadyExists.
	ID        uuid.UUID
	Namespace string
	Kind      string
	Tags      map[string]any
}

func (p *CreateFlowParams) normalize() error {
	if p.ID == uuid.Nil {
		p.ID = ident.NewUUID()
	}
	if p.Namespace == "" {
		p.Namespace = leases.DefaultNamespace
	}
	if err := leases.ValidateName("namespace", p.Namespace); err != nil {
		return err
	}
	if len(p.Kind) > leases.MaxKindLength {
		return fault.Invalid(fault.KindTooLarge, "kind", p.Kind, fmt.Sprintf("at most %d bytes", leases.MaxKindLength))
	}
	if p.Tags == nil {
		p.Tags = map[string]any{}
	}
	if _, err := json.Marshal(p.Tags); err != nil {
		return fault.Invalid(fault.KindInvalidValue, "tags", fmt.Sprint(p.Tags), "must encode as a JSON object")
	}
	return nil
}

// CreateFlow creates an open flow on its own partition. A repeat with the
// same id returns the existing flow and alreadyExists = true.
func CreateFlow(ctx context.Context, db store.DB, p CreateFlowParams) (f *Flow, alreadyExists bool, err error) {
	if err := p.normalize(); err != nil {
		return nil, false, err
	}
	part := ident.Partition(p.ID)
	f, err = scanFlow(db.QueryRow(ctx, `INSERT INTO ff_flow AS f (partition_key, flow_id, namespace, kind, tags)
		VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (partition_key, flow_id) DO NOTHING
		RETURNING `+flowColumns, part, p.ID, p.Namespace, p.Kind, p.Tags))
	if err == nil {
		return f, false, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create flow %s: %w", p.ID, err)
	}
	f, err = Get(ctx, db, p.ID)
	return f, err == nil, err
}

// Get reads a flow without its groups.
func Get(ctx context.Context, db store.DB, id uuid.UUID) (*Flow, error) {
	f, err := scanFlow(db.QueryRow(ctx, `SELECT `+flowColumns+` FROM ff_flow f
		WHERE f.partition_key = $1 AND f.flow_id = $2`, ident.Partition(id), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &fault.NotFoundError{Object: "flow", ID: id.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("read flow %s: %w", id, err)
	}
	return f, nil
}

// Describe reads a flow with every edge group and its counters.
func Describe(ctx context.Context, db store.DB, id uuid.UUID) (*Flow, error) {
	f, err := Get(ctx, db, id)
	if err != nil {
		return nil, err
	}
	rows, err := db.Query(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
		WHERE g.partition_key = $1 AND g.flow_id = $2 ORDER BY g.downstream_id`, f.Partition, f.ID)
	if err != nil {
		return nil, fmt.Errorf("read edge groups of flow %s: %w", id, err)
	}
	f.Groups, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (EdgeGroup, error) {
		g, err := scanGroup(r)
		return *g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read edge groups of flow %s: %w", id, err)
	}
	return f, nil
}

const groupColumns = `g.partition_key, g.downstream_id, g.policy, coalesce(g.k, 0), coalesce(g.on_satisfied, ''),
	g.total, g.success_count, g.fail_count, g.skip_count, g.decision, g.decided_at, g.cancel_members`

func scanGroup(row pgx.Row) (*EdgeGroup, error) {
	var g EdgeGroup
	var policy, onSat, decision string
	var members []uuid.UUID
	err := row.Scan(&g.Downstream.Partition, &g.Downstream.UUID, &policy, &g.Policy.K, &onSat,
		&g.Counts.Total, &g.Counts.Success, &g.Counts.Fail, &g.Counts.Skip, &decision, &g.DecidedAt, &members)
	if err != nil {
		return nil, err
	}
	g.Policy.Kind, g.Policy.OnSatisfied, g.Decision = store.PolicyKind(policy), store.OnSatisfied(onSat), store.Decision(decision)
	g.CancelMembers = idsOn(g.Downstream.Partition, members)
	return &g, nil
}

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = bound.MaxListLimit
)

// ListParams pages through flows in id (creation) order.
type ListParams struct {
	Namespace string          // default: every namespace
	State     store.FlowState // default: every state
	After     *uuid.UUID      // cursor: the previous page's Next
	Limit     int             // 1..MaxListLimit; 0 means DefaultListLimit; more is a ValidationError
}

// ListPage is one page; Next is nil on the last.
type ListPage struct {
	Flows []*Flow
	Next  *uuid.UUID
}

// List pages through flows by keyset on the flow id.
func List(ctx context.Context, db store.DB, p ListParams) (*ListPage, error) {
	if p.Namespace != "" {
		if err := leases.ValidateName("namespace", p.Namespace); err != nil {
			return nil, err
		}
	}
	switch p.State {
	case "", store.FlowOpen, store.FlowCompleted, store.FlowFailed, store.FlowCancelled:
	default:
		return nil, fault.Invalid(fault.KindInvalidValue, "state", string(p.State), "want open, completed, failed or cancelled")
	}
	if err := bound.ListLimit.CheckOrZero("limit", p.Limit); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	var ns, state *string
	if p.Namespace != "" {
		ns = &p.Namespace
	}
	if p.State != "" {
		s := string(p.State)
		state = &s
	}
	rows, err := db.Query(ctx, `SELECT `+flowColumns+` FROM ff_flow f
		WHERE ($1::text IS NULL OR f.namespace = $1) AND ($2::text IS NULL OR f.state = $2)
			AND ($3::uuid IS NULL OR f.flow_id > $3)
		ORDER BY f.flow_id LIMIT $4`, ns, state, p.After, limit+1)
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	flows, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*Flow, error) { return scanFlow(r) })
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	page := &ListPage{Flows: flows}
	if len(flows) > limit {
		page.Flows = flows[:limit]
		next := flows[limit-1].ID
		page.Next = &next
	}
	return page, nil
}

// openFlowForShare locks the flow against state changes (cancel_flow
// updates it) while a graph change commits, and reports why it cannot be
// changed when it is not open.
func openFlowForShare(ctx context.Context, tx pgx.Tx, id uuid.UUID) (*Flow, error) {
	f, err := scanFlow(tx.QueryRow(ctx, `SELECT `+flowColumns+` FROM ff_flow f
		WHERE f.partition_key = $1 AND f.flow_id = $2 FOR SHARE`, ident.Partition(id), id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &fault.NotFoundError{Object: "flow", ID: id.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("read flow %s: %w", id, err)
	}
	if f.State != store.FlowOpen {
		return nil, &fault.AlreadyTerminalError{Object: "flow", ID: id.String(), State: string(f.State)}
	}
	return f, nil
}
