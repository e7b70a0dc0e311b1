package leases

import (
	"context"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// List limits.
const (
	DefaultListLimit = 100
	MaxListLimit     = bound.MaxListLimit
)

// ListParams filters a listing; zero fields do not filter.
type ListParams struct {
	Namespace string
	Lane      string
	State     store.State
	FlowID    *uuid.UUID
	// After is the cursor: the last execution id of the previous page.
	After *ident.ExecutionID
	// Limit is 1..MaxListLimit; 0 means DefaultListLimit; more is a ValidationError.
	Limit int
}

// ListPage is one page; Next is nil on the last page.
type ListPage struct {
	Executions []*Execution
	Next       *ident.ExecutionID
}

// List pages through executions in id order (creation order, ids being
// time-ordered), by keyset: each page starts after the previous one's last
// id, so pages stay stable while rows are added.
func List(ctx context.Context, db store.DB, p ListParams) (*ListPage, error) {
	if p.Lane != "" {
		if err := ValidateName("lane", p.Lane); err != nil {
			return nil, err
		}
	}
	if p.State != "" && !p.State.Valid() {
		return nil, fault.Invalid(fault.KindInvalidValue, "state", string(p.State), "want blocked, pending, running, completed, failed, cancelled, skipped or expired")
	}
	if err := bound.ListLimit.CheckOrZero("limit", p.Limit); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	var after *uuid.UUID
	if p.After != nil {
		after = &p.After.UUID
	}
	rows, err := db.Query(ctx, `SELECT `+execColumns+` FROM ff_execution e
		WHERE ($1::text IS NULL OR e.namespace = $1)
			AND ($2::text IS NULL OR e.lane = $2)
			AND ($3::text IS NULL OR e.state = $3)
			AND ($4::uuid IS NULL OR e.flow_id = $4)
			AND ($5::uuid IS NULL OR e.execution_id > $5)
		ORDER BY e.execution_id
		LIMIT $6`,
		nullIfEmpty(p.Namespace), nullIfEmpty(p.Lane), nullIfEmpty(string(p.State)), p.FlowID, after, limit+1)
	if err != nil {
		return nil, wrap("list executions", err)
	}
	defer rows.Close()
	page := &ListPage{}
	for rows.Next() {
		x, err := scanExecution(rows)
		if err != nil {
			return nil, wrap("list executions", err)
		}
		page.Executions = append(page.Executions, x)
	}
	if err := rows.Err(); err != nil {
		return nil, wrap("list executions", err)
	}
	if len(page.Executions) > limit {
		page.Executions = page.Executions[:limit]
		next := page.Executions[limit-1].ID
		page.Next = &next
	}
	return page, nil
}
