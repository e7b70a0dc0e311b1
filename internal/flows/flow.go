package flows

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// normalizeFlow fills p's defaults and checks it.
func normalizeFlow(p *ffdtype.CreateFlowParams) error {
	if p.ID == uuid.Nil {
		p.ID = ident.NewUUID()
	}
	if err := leases.NormalizeNamespace(&p.Namespace); err != nil {
		return err
	}
	if err := leases.ValidateVersion("flow.version", p.Version); err != nil {
		return err
	}
	if len(p.Kind) > leases.MaxKindLength {
		return fault.Invalid(ffdtype.KindTooLarge, "kind", p.Kind, fmt.Sprintf("at most %d bytes", leases.MaxKindLength))
	}
	if p.Tags == nil {
		p.Tags = map[string]any{}
	}
	if _, err := json.Marshal(p.Tags); err != nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "tags", fmt.Sprint(p.Tags), "must encode as a JSON object")
	}
	return nil
}

// CreateFlow creates an open flow on its own partition. A repeat with the
// same id returns the existing flow and alreadyExists = true.
func CreateFlow(ctx context.Context, db store.DB, p ffdtype.CreateFlowParams) (f *ffdtype.Flow, alreadyExists bool, err error) {
	if err := normalizeFlow(&p); err != nil {
		return nil, false, err
	}
	if err := leases.KnownVersion(ctx, db, p.Namespace, p.Version); err != nil {
		return nil, false, err
	}
	f, err = store.InsertFlow(ctx, db, store.NewFlow{ID: p.ID, Namespace: p.Namespace, Kind: p.Kind, Tags: p.Tags, Version: p.Version})
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
func Get(ctx context.Context, db store.DB, id uuid.UUID) (*ffdtype.Flow, error) {
	f, err := store.GetFlow(ctx, db, id)
	if err != nil {
		return nil, flowErr("read", id, err)
	}
	return f, nil
}

// flowErr reports a missing flow as NotFoundError and wraps anything else
// with what was being done.
func flowErr(doing string, id uuid.UUID, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return &ffdtype.NotFoundError{Object: "flow", ID: id.String()}
	}
	return fmt.Errorf("%s flow %s: %w", doing, id, err)
}

// Describe reads a flow with every edge group and its counters.
func Describe(ctx context.Context, db store.DB, id uuid.UUID) (*ffdtype.Flow, error) {
	f, err := Get(ctx, db, id)
	if err != nil {
		return nil, err
	}
	if f.Groups, err = store.ListGroups(ctx, db, id); err != nil {
		return nil, fmt.Errorf("read edge groups of flow %s: %w", id, err)
	}
	return f, nil
}

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = bound.MaxListLimit
)

// List pages through flows by keyset on the flow id.
func List(ctx context.Context, db store.DB, p ffdtype.ListFlowsParams) (*ffdtype.ListFlowsPage, error) {
	if p.Namespace != "" {
		if err := leases.ValidateName("namespace", p.Namespace); err != nil {
			return nil, err
		}
	}
	switch p.State {
	case "", ffdtype.FlowOpen, ffdtype.FlowCompleted, ffdtype.FlowFailed, ffdtype.FlowCancelled:
	default:
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "state", string(p.State), "want open, completed, failed or cancelled")
	}
	if err := bound.ListLimit.CheckOrZero("limit", p.Limit); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	flows, err := store.ListFlows(ctx, db, store.FlowFilter{Namespace: p.Namespace, State: p.State, After: p.After, Limit: limit + 1})
	if err != nil {
		return nil, fmt.Errorf("list flows: %w", err)
	}
	page := &ffdtype.ListFlowsPage{Flows: flows}
	if len(flows) > limit {
		page.Flows = flows[:limit]
		next := flows[limit-1].ID
		page.Next = &next
	}
	return page, nil
}

// lockOpenFlow locks a flow (Locks.Flow) and reports why it cannot be
// changed when it is missing or not open.
func lockOpenFlow(ctx context.Context, locks *store.Locks, id uuid.UUID, mode store.LockMode) (*ffdtype.Flow, error) {
	f, err := locks.Flow(ctx, id, mode)
	if err != nil {
		return nil, flowErr("lock", id, err)
	}
	if f.State != ffdtype.FlowOpen {
		return nil, &ffdtype.AlreadyTerminalError{Object: "flow", ID: id.String(), State: string(f.State)}
	}
	return f, nil
}
