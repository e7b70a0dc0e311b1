package flows

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/wire"
)

// CompensationKind is the kind of a compensation flow.
const CompensationKind = "ffd.compensation"

// Compensate runs the compensations of an armed flow that finished, in
// one transaction with the flow locked: for a flow that failed or was
// cancelled, and has no live member left, it submits the compensation
// flow (on the flow's partition, CompensationOf naming the flow): one
// step per completed step that names a compensation, each after the
// compensations of the steps that depended on it (reverse dependency
// order), and the on-failure step beside them; a completed flow is
// disarmed. It returns the compensation flow, or nil. Whatever a crash
// interrupts is redone whole: the flow stays armed until the compensation
// flow is committed with it.
func Compensate(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID) (*uuid.UUID, error) {
	var out *uuid.UUID
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		out = nil
		f, err := store.NewLocks(tx).Flow(ctx, flowID, store.ForUpdate)
		if err != nil {
			return flowErr("lock", flowID, err)
		}
		switch {
		case f.Compensation != ffdtype.CompensationArmed, f.State == ffdtype.FlowOpen:
			return nil
		case f.State == ffdtype.FlowCompleted:
			return store.SetCompensation(ctx, tx, flowID, ffdtype.CompensationNotNeeded, nil)
		}
		p, live, err := compensationPlan(ctx, tx, f)
		if err != nil || live {
			return err
		}
		if len(p.Nodes) == 0 {
			return store.SetCompensation(ctx, tx, flowID, ffdtype.CompensationNotNeeded, nil)
		}
		sub, err := planSubmit(p, lim.AtLeast(MaxPayload(p)), 0, nil)
		if err != nil {
			return fmt.Errorf("the compensations of flow %s: %w", flowID, err)
		}
		res, err := sub.write(ctx, tx, store.FlowLinks{Compensates: &flowID})
		if err != nil {
			return err
		}
		out = &res.Flow.ID
		return store.SetCompensation(ctx, tx, flowID, ffdtype.CompensationStarted, out)
	})
	if err != nil {
		return nil, wrapOp("compensate flow "+flowID.String(), err)
	}
	return out, nil
}

// compensationPlan is the compensation flow of f: its completed steps'
// compensations in reverse dependency order, and its on-failure step.
// live says f still has a live member (a cancelled flow's running
// steps finish first).
func compensationPlan(ctx context.Context, tx pgx.Tx, f *ffdtype.Flow) (ffdtype.SubmitFlowParams, bool, error) {
	xs, err := store.FlowMembers(ctx, tx, f.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, false, err
	}
	raw, err := store.FlowCompensations(ctx, tx, f.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, false, err
	}
	edges, err := store.FlowEdges(ctx, tx, f.ID)
	if err != nil {
		return ffdtype.SubmitFlowParams{}, false, err
	}
	p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{ID: ident.NewUUIDIn(f.Partition), Namespace: f.Namespace,
		Kind: CompensationKind, Version: f.Version, Tags: map[string]any{"compensates": f.ID.String()}}}
	failure := ffdtype.Failure{Flow: f.ID, State: f.State, Failed: []ffdtype.FailedStep{}, Compensating: []string{}}
	byID := make(map[uuid.UUID]*ffdtype.Execution, len(xs))
	comp := map[uuid.UUID]bool{} // completed members with a compensation
	for _, x := range xs {
		if !x.State.Terminal() {
			return p, true, nil
		}
		byID[x.ID.UUID] = x
		_, has := raw[x.Step]
		switch {
		case x.State == ffdtype.StateCompleted && has && x.Step != "":
			comp[x.ID.UUID] = true
			cp, _, err := wire.Decode(raw[x.Step], wire.TargetExecution)
			if err != nil {
				return p, false, fmt.Errorf("the compensation of step %s: %w", x.Step, err)
			}
			p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: x.Step, Params: *cp})
			failure.Compensating = append(failure.Compensating, x.Step)
		case x.State != ffdtype.StateCompleted:
			failure.Failed = append(failure.Failed, ffdtype.FailedStep{Step: x.Step, Execution: x.ID, State: x.State, Error: x.LastError})
		}
	}
	p.Edges = reverseEdges(edges, byID, comp)
	if r, ok := raw[OnFailureStep]; ok {
		cp, _, err := wire.Decode(r, wire.TargetExecution)
		if err != nil {
			return p, false, fmt.Errorf("the on-failure step: %w", err)
		}
		slices.Sort(failure.Compensating)
		if cp.Payload, err = json.Marshal(failure); err != nil {
			return p, false, err
		}
		p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: OnFailureStep, Params: *cp})
	}
	return p, false, nil
}

// reverseEdges orders compensations against the flow's edges: for each
// compensated step s and each compensated step d reachable from s (along
// paths through steps without one), d's compensation runs before s's.
func reverseEdges(edges []*ffdtype.Edge, byID map[uuid.UUID]*ffdtype.Execution, comp map[uuid.UUID]bool) []ffdtype.SubmitEdge {
	next := map[uuid.UUID][]uuid.UUID{}
	for _, e := range edges {
		if e.State != ffdtype.EdgeStaged {
			next[e.Upstream.UUID] = append(next[e.Upstream.UUID], e.Downstream.UUID)
		}
	}
	var out []ffdtype.SubmitEdge
	seenPair := map[[2]uuid.UUID]bool{}
	ids := make([]uuid.UUID, 0, len(comp))
	for id := range comp {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	for _, s := range ids {
		seen := map[uuid.UUID]bool{s: true}
		stack := slices.Clone(next[s])
		for len(stack) > 0 {
			d := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[d] {
				continue
			}
			seen[d] = true
			if !comp[d] {
				stack = append(stack, next[d]...)
				continue
			}
			if !seenPair[[2]uuid.UUID{d, s}] {
				seenPair[[2]uuid.UUID{d, s}] = true
				out = append(out, ffdtype.SubmitEdge{From: byID[d].Step, To: byID[s].Step})
			}
		}
	}
	return out
}

// AddCompensation gives a step of an open flow built member by member
// (CreateInFlow) its compensation, or the flow its on-failure step (step
// OnFailureStep), as SubmitNode.Compensate and CreateFlowParams.OnFailure
// do at submission. A step the flow does not have is a *ValidationError;
// a step that has one already a *ConflictError; a finished flow an
// *AlreadyTerminalError. It arms the flow.
func AddCompensation(ctx context.Context, db store.DB, lim leases.Limits, flowID uuid.UUID, step string, cp ffdtype.CreateParams) error {
	if step == "" || len(step) > leases.MaxNameLength {
		return fault.Invalid(ffdtype.KindInvalidValue, "step", step, "want a step's name, or "+OnFailureStep)
	}
	if step == OnFailureStep && (len(cp.Payload) > 0 || cp.JSON != nil) {
		return fault.Invalid(ffdtype.KindInvalidValue, "payload", "", "the on-failure step's payload is the failure; leave it empty")
	}
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		f, err := lockOpenFlow(ctx, store.NewLocks(tx), flowID, store.ForUpdate)
		if err != nil {
			return err
		}
		if step != OnFailureStep {
			has, err := store.MembersByStep(ctx, tx, flowID, []string{step})
			if err != nil {
				return err
			}
			if _, ok := has[step]; !ok {
				return fault.Invalid(ffdtype.KindInvalidValue, "step", step, "flow "+flowID.String()+" has no step of this name")
			}
		}
		p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{ID: flowID, Namespace: f.Namespace, Version: f.Version}}
		c, err := planCompensation(p, step, cp, lim)
		if err != nil {
			return err
		}
		if err := store.InsertCompensations(ctx, tx, flowID, []store.NewCompensation{c}); err != nil {
			if store.IsCompensationTaken(err) {
				return &ffdtype.ConflictError{Object: "compensation", ID: step, Reason: "step " + step + " of flow " + flowID.String() + " has a compensation already"}
			}
			return err
		}
		if f.Compensation == "" {
			return store.ArmCompensation(ctx, tx, flowID)
		}
		return nil
	})
	if err != nil {
		return wrapOp("add a compensation to step "+step+" of flow "+flowID.String(), err)
	}
	return nil
}
