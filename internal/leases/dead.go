package leases

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// Bulk rerun bounds: one call reruns at most MaxDeadRerun dead letters,
// deadRerunBatch to a transaction.
const (
	DefaultDeadRerun = 1000
	MaxDeadRerun     = 10000
	deadRerunBatch   = 1000
)

// deadRerunLimit is RerunDeadParams.Limit's range.
var deadRerunLimit = bound.Int{Min: 1, Max: MaxDeadRerun, Default: DefaultDeadRerun}

func checkDeadFilter(f ffdtype.DeadLetterFilter) error {
	if len(f.IDs) > 0 && (f.Namespace != "" || f.Lane != "" || f.Kind != "" || f.ErrorContains != "") {
		return fault.Invalid(ffdtype.KindInvalidValue, "ids", fmt.Sprintf("%d ids", len(f.IDs)), "select by ids or by namespace, lane, kind and error text, not both")
	}
	for _, id := range f.IDs {
		if err := ValidateID("execution_id", id); err != nil {
			return err
		}
	}
	if f.Lane != "" {
		if err := ValidateName("lane", f.Lane); err != nil {
			return err
		}
	}
	if f.Namespace != "" {
		return ValidateName("namespace", f.Namespace)
	}
	return nil
}

func storeFilter(f ffdtype.DeadLetterFilter, limit int) store.DeadFilter {
	return store.DeadFilter{Namespace: f.Namespace, Lane: f.Lane, Kind: f.Kind, ErrorContains: f.ErrorContains, IDs: f.IDs, Limit: limit}
}

// ListDead pages through dead letters in id order.
func ListDead(ctx context.Context, db store.DB, p ffdtype.ListDeadParams) (*ffdtype.ListPage, error) {
	if err := checkDeadFilter(p.DeadLetterFilter); err != nil {
		return nil, err
	}
	limit, err := pageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	f := storeFilter(p.DeadLetterFilter, limit+1)
	if p.After != nil {
		f.After = &p.After.UUID
	}
	xs, err := store.ListDead(ctx, db, f)
	if err != nil {
		return nil, err
	}
	return pageOf(xs, limit), nil
}

// RerunDead reruns the dead letters p selects, as Rerun does one: each a
// new execution from its parameters, on its partition, linked by
// rerun_of. Bad input, and any id that is not a dead letter, is refused
// before anything is written. A dead letter rerun meanwhile by another
// caller is left out, so each is rerun once however many callers race.
func RerunDead(ctx context.Context, db store.DB, lim Limits, p ffdtype.RerunDeadParams) (*ffdtype.DeadRerun, error) {
	if err := checkDeadFilter(p.DeadLetterFilter); err != nil {
		return nil, err
	}
	if p.Empty() && !p.All {
		return nil, fault.Invalid(ffdtype.KindRequired, "filter", "", "select dead letters by ids, namespace, lane, kind or error text, or ask for all of them")
	}
	limit := p.Limit
	if err := deadRerunLimit.Fill("limit", &limit); err != nil {
		return nil, err
	}
	p.IDs = uniqueIDs(p.IDs) // an id given twice is rerun once
	if len(p.IDs) > limit {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "ids", fmt.Sprintf("%d ids", len(p.IDs)), fmt.Sprintf("at most the limit, %d", limit))
	}
	xs, err := store.ListDead(ctx, db, storeFilter(p.DeadLetterFilter, limit+1))
	if err != nil {
		return nil, err
	}
	out := &ffdtype.DeadRerun{DryRun: p.DryRun, Selected: xs}
	if len(xs) > limit {
		out.Selected, out.More = xs[:limit], true
	}
	if len(p.IDs) > 0 && len(xs) < len(p.IDs) {
		return nil, notDead(ctx, db, p.IDs, xs)
	}
	if p.DryRun {
		return out, nil
	}
	for start := 0; start < len(out.Selected); start += deadRerunBatch {
		batch := out.Selected[start:min(start+deadRerunBatch, len(out.Selected))]
		made, err := rerunBatch(ctx, db, lim, batch)
		out.Reruns = append(out.Reruns, made...)
		if err != nil {
			return out, fmt.Errorf("rerun dead letters (%d of %d rerun): %w", len(out.Reruns), len(out.Selected), err)
		}
	}
	return out, nil
}

// uniqueIDs is ids without repeats, in their first order.
func uniqueIDs(ids []ffdtype.ExecutionID) []ffdtype.ExecutionID {
	seen := make(map[ffdtype.ExecutionID]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// notDead is the error for ids of which some are not dead letters: the
// first such, as Rerun would refuse it.
func notDead(ctx context.Context, db store.DB, ids []ffdtype.ExecutionID, dead []*ffdtype.Execution) error {
	found := make(map[uuid.UUID]bool, len(dead))
	for _, x := range dead {
		found[x.ID.UUID] = true
	}
	for _, id := range ids {
		if found[id.UUID] {
			continue
		}
		x, err := Get(ctx, db, id)
		if err != nil {
			return err
		}
		reason := "rerun already; rerun the rerun to try again"
		switch {
		case x.FlowID != nil:
			reason = "a member of flow " + x.FlowID.String() + ": rerun the flow"
		case !x.State.Terminal():
			reason = "still " + string(x.State) + ": not a dead letter"
		case x.State != ffdtype.StateFailed && x.State != ffdtype.StateExpired:
			reason = string(x.State) + ": not a dead letter"
		}
		return &ffdtype.ConflictError{Object: "execution", ID: id.String(), Reason: reason, Existing: x}
	}
	return fmt.Errorf("rerun dead letters: %d ids, %d dead letters, and no id missing from them", len(ids), len(dead))
}

// rerunBatch reruns dead letters in one transaction. When another caller
// reran one of them first (the rerun index refuses the second), it reads
// which are still dead, on a fresh snapshot, and tries those.
func rerunBatch(ctx context.Context, db store.DB, lim Limits, dead []*ffdtype.Execution) ([]*ffdtype.Execution, error) {
	for try := 0; len(dead) > 0; try++ {
		made, err := insertReruns(ctx, db, lim, dead)
		if !store.IsRerunTaken(err) || try >= 10 {
			return made, err
		}
		ids := make([]ffdtype.ExecutionID, len(dead))
		for i, x := range dead {
			ids[i] = x.ID
		}
		if dead, err = store.ListDead(ctx, db, store.DeadFilter{IDs: ids, Limit: len(ids)}); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func insertReruns(ctx context.Context, db store.DB, lim Limits, dead []*ffdtype.Execution) ([]*ffdtype.Execution, error) {
	ns := make([]Normalized, len(dead))
	for i, old := range dead {
		n, err := Normalize(ParamsOf(old), Placement{Partition: &old.ID.Partition}, lim.AtLeast(len(old.Payload)))
		if err != nil {
			return nil, fmt.Errorf("rerun execution %s: %w", old.ID, err)
		}
		ns[i] = n
	}
	var made []*ffdtype.Execution
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		xs, err := InsertMany(ctx, tx, ns)
		if err != nil {
			return err
		}
		pairs := make([]store.Carried, len(xs))
		for i, x := range xs {
			pairs[i] = store.Carried{New: x.ID, Old: dead[i].ID}
			x.RerunOf = &dead[i].ID.UUID
		}
		made = xs
		return store.LinkRerunMembers(ctx, tx, pairs)
	})
	if err != nil {
		var ve *ffdtype.ValidationError
		if errors.As(err, &ve) || store.IsRerunTaken(err) {
			return nil, err
		}
		return nil, wrap("rerun dead letters", err)
	}
	return made, nil
}
