package flows

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// RerunFlow reruns a failed or cancelled flow as a new flow linked to it
// (rerun_of): the same steps, edges and policies, on a new flow id of the
// old flow's partition (so the rerun and its original, and the index that
// allows one rerun, share a partition). Steps
// that completed are carried over: their new executions are completed at
// once with the old results, without running, and their completion events
// go through the cascade like any other, so the rest of the graph
// unblocks exactly as it would have. Every other step (failed, expired,
// skipped, cancelled) runs again. The old flow and its history stay as
// they are. A flow is rerun at most once (a second call is a conflict
// carrying the rerun); to try again, rerun the rerun.
func RerunFlow(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID) (*ffdtype.SubmittedFlow, error) {
	var res *ffdtype.SubmittedFlow
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		old, err := store.NewLocks(tx).Flow(ctx, flowID, store.ForShare)
		if err != nil {
			return flowErr("lock", flowID, err)
		}
		switch old.State {
		case ffdtype.FlowOpen:
			return &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "still open: wait for it to finish, or cancel it, before a rerun"}
		case ffdtype.FlowCompleted:
			return &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "completed: every step succeeded, so there is nothing to rerun"}
		}
		p, members, err := rerunPlan(ctx, tx, old)
		if err != nil {
			return err
		}
		g, err := graphOf(p)
		if err != nil {
			return err
		}
		// The members' payloads were accepted once: a smaller limit here
		// (the console's, say) must not refuse them.
		lim := lim.AtLeast(MaxPayload(p))
		params, groups, err := planNodes(p, g, lim)
		if err != nil {
			return err
		}
		if res, err = submit(ctx, tx, lim, p, g, params, groups); err != nil {
			return err
		}
		return linkRerun(ctx, tx, old.ID, res, p, members)
	})
	if store.IsRerunTaken(err) {
		again, ferr := store.FindRerun(ctx, db, flowID)
		if ferr != nil {
			return nil, wrapOp("find the rerun of flow "+flowID.String(), ferr)
		}
		return nil, &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "already rerun as flow " + again.ID.String() + "; rerun that one to try again", Existing: again}
	}
	if err != nil {
		return nil, wrapOp("rerun flow "+flowID.String(), err)
	}
	return res, nil
}

// rerunPlan is the old flow as a submission: a node per member (named by
// its step, or by its id when it has none), its applied and resolved
// edges, its groups' policies. members maps each node's ref to the
// execution it reruns.
func rerunPlan(ctx context.Context, tx pgx.Tx, old *ffdtype.Flow) (ffdtype.SubmitFlowParams, map[string]*ffdtype.Execution, error) {
	xs, err := store.FlowMembers(ctx, tx, old.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, nil, err
	}
	edges, err := store.FlowEdges(ctx, tx, old.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, nil, err
	}
	groups, err := store.ListGroups(ctx, tx, old.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, nil, err
	}
	p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{ID: ident.NewUUIDIn(ident.Partition(old.ID)), Namespace: old.Namespace, Kind: old.Kind, Tags: old.Tags}}
	ref := make(map[uuid.UUID]string, len(xs))
	members := make(map[string]*ffdtype.Execution, len(xs))
	for _, x := range xs {
		if !x.State.Terminal() {
			return ffdtype.SubmitFlowParams{}, nil, &ffdtype.ConflictError{Object: "flow", ID: old.ID.String(),
				Reason: "member " + x.ID.String() + " is still " + string(x.State) + " (the flow was cancelled flow_only): wait for it before a rerun"}
		}
		r := x.Step
		if r == "" {
			r = "member-" + x.ID.UUID.String()
		}
		ref[x.ID.UUID], members[r] = r, x
	}
	indeg := map[string]int{}
	for _, e := range edges {
		if e.State == ffdtype.EdgeStaged {
			continue // never part of the graph
		}
		p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: ref[e.Upstream.UUID], To: ref[e.Downstream.UUID], DependencyKind: e.DependencyKind, DataPassingRef: e.DataPassingRef})
		indeg[ref[e.Downstream.UUID]]++
	}
	policy := make(map[uuid.UUID]ffdtype.Policy, len(groups))
	for _, gr := range groups {
		policy[gr.Downstream.UUID] = gr.Policy
	}
	for _, x := range xs {
		n := ffdtype.SubmitNode{Ref: ref[x.ID.UUID], Params: leases.ParamsOf(x)}
		if pol, ok := policy[x.ID.UUID]; ok && indeg[n.Ref] > 0 {
			n.Policy = &pol
		}
		p.Nodes = append(p.Nodes, n)
	}
	return p, members, nil
}

// linkRerun records the rerun (which fails on a second rerun of the same
// flow) and carries the completed steps over.
func linkRerun(ctx context.Context, tx pgx.Tx, oldID uuid.UUID, res *ffdtype.SubmittedFlow, p ffdtype.SubmitFlowParams, members map[string]*ffdtype.Execution) error {
	if err := store.LinkFlowRerun(ctx, tx, res.Flow.ID, oldID); err != nil {
		return err
	}
	res.Flow.RerunOf = &oldID
	var all, carried []store.Carried
	for _, n := range p.Nodes {
		old, x := members[n.Ref], res.Executions[n.Ref]
		pair := store.Carried{New: x.ID, Old: old.ID}
		all = append(all, pair)
		if old.State == ffdtype.StateCompleted {
			carried = append(carried, pair)
		}
	}
	if err := store.LinkRerunMembers(ctx, tx, all); err != nil {
		return err
	}
	if len(carried) > 0 {
		if err := store.CarryCompleted(ctx, tx, carried); err != nil {
			return err
		}
	}
	// The rerun as it now stands: carried steps completed, every step
	// linked to the one it reruns.
	xs, err := store.FlowMembers(ctx, tx, res.Flow.ID)
	if err != nil {
		return err
	}
	for _, x := range xs {
		res.Executions[x.Step] = x
	}
	return nil
}
