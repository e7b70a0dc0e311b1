package leases

import (
	"context"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = bound.MaxListLimit
)

// List pages through executions in id order (creation order, ids being
// time-ordered), by keyset: each page starts after the previous one's last
// id, so pages stay stable while rows are added.
func List(ctx context.Context, db store.DB, p ffdtype.ListParams) (*ffdtype.ListPage, error) {
	if p.Lane != "" {
		if err := ValidateName("lane", p.Lane); err != nil {
			return nil, err
		}
	}
	if p.State != "" && !p.State.Valid() {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "state", string(p.State), "want blocked, pending, running, completed, failed, cancelled, skipped or expired")
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var after *uuid.UUID
	if p.After != nil {
		after = &p.After.UUID
	}
	xs, err := store.ListExecutions(ctx, db, store.ExecutionFilter{Namespace: p.Namespace, Lane: p.Lane,
		State: p.State, Kind: p.Kind, FlowID: p.FlowID, After: after, Limit: limit + 1})
	if err != nil {
		return nil, err
	}
	return pageOf(xs, limit), nil
}

// pageLimit checks a list call's page size and fills its default.
func pageLimit(limit int) (int, error) {
	if err := bound.ListLimit.CheckOrZero("limit", limit); err != nil {
		return 0, err
	}
	if limit == 0 {
		limit = DefaultListLimit
	}
	return limit, nil
}

// pageOf is a page of up to limit of xs, read with one row more than
// limit: that row, when there, says another page follows.
func pageOf(xs []*ffdtype.Execution, limit int) *ffdtype.ListPage {
	page := &ffdtype.ListPage{Executions: xs}
	if len(xs) > limit {
		page.Executions = xs[:limit]
		next := xs[limit-1].ID
		page.Next = &next
	}
	return page
}
