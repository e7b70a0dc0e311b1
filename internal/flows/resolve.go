package flows

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// Decided is a group that decided during a Resolve.
type Decided struct {
	FlowID     uuid.UUID
	Downstream ffdtype.ExecutionID
	Decision   ffdtype.Decision
	Policy     ffdtype.Policy
}

// ResolveResult says what a Resolve did, for the caller's metrics.
type ResolveResult struct {
	EdgesResolved int
	ByOutcome     map[string]int
	Decided       []Decided
	CancelGroups  int                   // cancel_remaining groups queued for sibling cancellation
	Skipped       []store.Ended         // downstreams skipped (their completion events written)
	Readied       []ffdtype.ExecutionID // downstreams made pending
}

// Resolve resolves the applied outgoing edges of the given upstreams from
// their outcomes, in the caller's transaction, in four steps:
//
//  1. lock: the groups the edges feed, in key order, and
//  2. resolve: edges become resolved and group counters move, one
//     statement each in one round trip (store.Locks.ResolveEdges);
//  3. plan: every group that has not decided yet is evaluated (Evaluate);
//  4. apply: satisfied, the blocked downstream becomes pending (ff_ready
//     fires at commit) and, under cancel_remaining, its live sibling
//     upstreams are recorded and the group is queued for the
//     sibling-cancel workers (store.RecordDecisions); impossible, the
//     downstream is skipped through store.Terminate, which writes its
//     completion event for the cascade to carry further.
//
// relaxed says the caller's transaction writes nothing else a crash must
// not take back (a dispatch); a resolve that then skips nothing lets it
// commit without waiting for the WAL flush (store.DecisionEffects).
func Resolve(ctx context.Context, tx pgx.Tx, rs []store.Resolution, relaxed bool) (*ResolveResult, error) {
	res := &ResolveResult{ByOutcome: map[string]int{}}
	if len(rs) == 0 {
		return res, nil
	}
	moved, err := store.NewLocks(tx).ResolveEdges(ctx, rs)
	if err != nil {
		return nil, fmt.Errorf("lock edge groups and resolve edges: %w", err)
	}
	effects, skip := plan(moved, res)
	// A skip writes completion events, which consumers read: only a
	// resolve that skips nothing may leave the flush to later.
	effects.Unflushed = relaxed && len(skip) == 0
	if res.CancelGroups, err = store.RecordDecisions(ctx, tx, effects); err != nil {
		return nil, fmt.Errorf("record decisions: %w", err)
	}
	if len(skip) > 0 {
		if res.Skipped, err = store.Terminate(ctx, tx, skip); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// plan counts the resolutions into res and decides the groups that moved:
// the decisions to record, and the downstreams to skip.
func plan(moved []store.Moved, res *ResolveResult) (store.DecisionEffects, []store.Termination) {
	var effects store.DecisionEffects
	var skip []store.Termination
	for _, m := range moved {
		res.EdgesResolved += m.Resolved
		res.ByOutcome["success"] += m.Success
		res.ByOutcome["failed"] += m.Failed
		res.ByOutcome["skipped"] += m.Skipped
		g := m.Group
		if g.Decision != ffdtype.DecisionPending {
			continue // decided once; later resolutions only count
		}
		if g.Decision = Evaluate(g.Policy, g.Counts); g.Decision == ffdtype.DecisionPending {
			continue
		}
		res.Decided = append(res.Decided, Decided{FlowID: g.FlowID, Downstream: g.Downstream, Decision: g.Decision, Policy: g.Policy})
		effects.Decided = append(effects.Decided, g)
		if g.Decision == ffdtype.DecisionImpossible {
			skip = append(skip, store.Termination{ID: g.Downstream, State: ffdtype.StateSkipped, Error: "dependencies can no longer be satisfied"})
			continue
		}
		effects.Ready = append(effects.Ready, g.Downstream)
		effects.Lanes = append(effects.Lanes, m.Lane)
		res.Readied = append(res.Readied, g.Downstream)
		if g.Policy.OnSatisfied == ffdtype.CancelRemaining {
			effects.Cancel = append(effects.Cancel, g)
		}
	}
	return effects, skip
}
