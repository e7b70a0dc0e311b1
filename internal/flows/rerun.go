package flows

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/wire"
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
//
// A sub-flow's rerun is its parent's: RerunFlow on a child reruns the
// outermost flow above it, whose failed sub-flow steps rerun their
// children (carrying their completed steps over). A flow whose
// compensations ran is not rerun: its completed steps were undone.
func RerunFlow(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID) (*ffdtype.SubmittedFlow, error) {
	top, err := outermost(ctx, db, flowID)
	if err != nil {
		return nil, wrapOp("rerun flow "+flowID.String(), err)
	}
	flowID = top
	var res *ffdtype.SubmittedFlow
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		res, err = rerunInTx(ctx, tx, lim, flowID, store.FlowLinks{})
		return err
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

// outermost is the flow above every parent of flowID's (flowID itself
// when it is no sub-flow).
func outermost(ctx context.Context, db store.DB, flowID uuid.UUID) (uuid.UUID, error) {
	for range MaxSubflowDepth * 4 {
		f, err := store.GetFlow(ctx, db, flowID)
		if err != nil {
			return uuid.Nil, flowErr("read", flowID, err)
		}
		if f.Parent == nil {
			return flowID, nil
		}
		step, err := store.GetExecution(ctx, db, *f.Parent)
		if err != nil || step.FlowID == nil {
			return uuid.Nil, fmt.Errorf("read the parent step %s of flow %s: %w", f.Parent, flowID, err)
		}
		flowID = *step.FlowID
	}
	return uuid.Nil, fmt.Errorf("flow %s: sub-flows nest deeper than %d", flowID, MaxSubflowDepth*4)
}

// rerunInTx reruns flowID in tx, the new flow linked by links (a rerun
// child's parent step).
func rerunInTx(ctx context.Context, tx pgx.Tx, lim leases.Limits, flowID uuid.UUID, links store.FlowLinks) (*ffdtype.SubmittedFlow, error) {
	old, err := store.NewLocks(tx).Flow(ctx, flowID, store.ForShare)
	if err != nil {
		return nil, flowErr("lock", flowID, err)
	}
	switch {
	case old.State == ffdtype.FlowOpen:
		return nil, &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "still open: wait for it to finish, or cancel it, before a rerun"}
	case old.State == ffdtype.FlowCompleted:
		return nil, &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "completed: every step succeeded, so there is nothing to rerun"}
	case old.Compensation == ffdtype.CompensationStarted:
		return nil, &ffdtype.ConflictError{Object: "flow", ID: flowID.String(), Reason: "compensated: its completed steps were undone, so there is nothing to carry over; submit it anew"}
	}
	p, members, olds, err := rerunPlan(ctx, tx, old)
	if err != nil {
		return nil, err
	}
	// The members' payloads were accepted once: a smaller limit here
	// (the console's, say) must not refuse them.
	sub, err := planSubmit(p, lim.AtLeast(MaxPayload(p)), 0, nil)
	if err != nil {
		return nil, err
	}
	res, err := sub.write(ctx, tx, links)
	if err != nil {
		return nil, err
	}
	if err := linkRerun(ctx, tx, old.ID, res, p, members); err != nil {
		return nil, err
	}
	return res, linkRerunChildren(ctx, tx, olds, res)
}

// linkRerunChildren tells each sub-flow step of a rerun that runs again
// the child its old step (of olds, by id) had, to rerun it when it
// starts; a step carried over (completed) keeps its old child.
func linkRerunChildren(ctx context.Context, tx pgx.Tx, olds map[uuid.UUID]store.Subflow, res *ffdtype.SubmittedFlow) error {
	var links []store.RerunSubflow
	for _, x := range res.Executions {
		if s, ok := olds[uuidOr(x.RerunOf)]; ok && s.Child != nil {
			links = append(links, store.RerunSubflow{Step: x.ID, OldChild: *s.Child, Carried: x.State == ffdtype.StateCompleted})
		}
	}
	return store.LinkRerunSubflows(ctx, tx, links)
}

// rerunPlan is the old flow as a submission: a node per member (named by
// its step, or by its id when it has none), its applied and resolved
// edges, its groups' policies. members maps each node's ref to the
// execution it reruns; olds are the old flow's sub-flow steps, by id.
func rerunPlan(ctx context.Context, tx pgx.Tx, old *ffdtype.Flow) (p ffdtype.SubmitFlowParams, members map[string]*ffdtype.Execution, olds map[uuid.UUID]store.Subflow, err error) {
	xs, err := store.FlowMembers(ctx, tx, old.ID)
	if err != nil {
		return p, nil, nil, err
	}
	edges, err := store.FlowEdges(ctx, tx, old.ID)
	if err != nil {
		return p, nil, nil, err
	}
	groups, err := store.ListGroups(ctx, tx, old.ID)
	if err != nil {
		return p, nil, nil, err
	}
	p = ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{ID: ident.NewUUIDIn(ident.Partition(old.ID)), Namespace: old.Namespace, Kind: old.Kind, Tags: old.Tags, Version: old.Version}}
	extra, olds, err := oldExtras(ctx, tx, old, &p)
	if err != nil {
		return p, nil, nil, err
	}
	ref := make(map[uuid.UUID]string, len(xs))
	members = make(map[string]*ffdtype.Execution, len(xs))
	for _, x := range xs {
		if !x.State.Terminal() {
			return p, nil, nil, &ffdtype.ConflictError{Object: "flow", ID: old.ID.String(),
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
		extra(x, &n)
		if pol, ok := policy[x.ID.UUID]; ok && indeg[n.Ref] > 0 {
			n.Policy = &pol
		}
		p.Nodes = append(p.Nodes, n)
	}
	return p, members, olds, nil
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

// oldExtras reads what the old flow keeps beside its members (sub-flow
// steps, compensations, its on-failure step, which it puts on p) and
// returns what puts them on a member's node, and the sub-flow steps.
func oldExtras(ctx context.Context, tx pgx.Tx, old *ffdtype.Flow, p *ffdtype.SubmitFlowParams) (func(*ffdtype.Execution, *ffdtype.SubmitNode), map[uuid.UUID]store.Subflow, error) {
	subs, err := store.FlowSubflows(ctx, tx, old.ID)
	if err != nil {
		return nil, nil, err
	}
	comps := map[string]*ffdtype.CreateParams{}
	if old.Compensation != "" {
		raw, err := store.FlowCompensations(ctx, tx, old.ID)
		if err != nil {
			return nil, nil, err
		}
		for step, r := range raw {
			cp, _, err := wire.Decode(r, wire.TargetExecution)
			if err != nil {
				return nil, nil, fmt.Errorf("the compensation of step %s of flow %s: %w", step, old.ID, err)
			}
			comps[step] = cp
		}
		p.Flow.OnFailure = comps[OnFailureStep]
	}
	children := make(map[uuid.UUID]*ffdtype.SubmitFlowParams, len(subs))
	for id, s := range subs {
		_, fp, err := wire.Decode(s.Template, wire.TargetFlow)
		if err != nil {
			return nil, nil, fmt.Errorf("the child of sub-flow step %s: %w", s.Step, err)
		}
		children[id] = fp
	}
	return func(x *ffdtype.Execution, n *ffdtype.SubmitNode) {
		if c, ok := children[x.ID.UUID]; ok {
			n.Flow = c
		}
		if x.Step != "" {
			n.Compensate = comps[x.Step]
		}
	}, subs, nil
}

// uuidOr is *u, or the nil uuid.
func uuidOr(u *uuid.UUID) uuid.UUID {
	if u == nil {
		return uuid.Nil
	}
	return *u
}
