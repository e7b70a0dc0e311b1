package flows

import (
	"context"
	"encoding/json"
	"errors"
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

// MaxSubflowDepth bounds how deep sub-flows nest in one submission: a
// flow, its sub-flows, theirs, and so on.
const MaxSubflowDepth = 8

// Reasons and attribution of what the linker ends.
const (
	SubflowCancelReason = "sub-flow cancelled"
	ParentEndedReason   = "the parent's sub-flow step ended"
	LinkerBy            = "engine"
)

// subflowStep checks a sub-flow step's own params and fills what the
// engine decides: its lane and its single attempt.
func subflowStep(cp *ffdtype.CreateParams, ref string) error {
	bad := func(field, value, why string) error {
		return fault.Invalid(ffdtype.KindInvalidValue, field, value, "node "+ref+": "+why)
	}
	switch {
	case cp.Lane != "" && cp.Lane != store.SubflowLane:
		return bad("nodes.params.lane", cp.Lane, "a sub-flow step has no lane: the daemon runs it")
	case len(cp.Payload) > 0 || cp.JSON != nil:
		return bad("nodes.params.payload", fmt.Sprintf("%d bytes", len(cp.Payload)), "a sub-flow step's body is its Flow; give the child's steps their payloads")
	case cp.MaxAttempts > 1:
		return bad("nodes.params.max_attempts", fmt.Sprint(cp.MaxAttempts), "a sub-flow step runs once; its child's steps retry")
	case cp.AttemptTimeout != 0:
		return bad("nodes.params.attempt_timeout", cp.AttemptTimeout.String(), "a sub-flow step runs as long as its child; bound it with Deadline")
	case len(cp.RequiredCapabilities) > 0, cp.ConcurrencyKey != "":
		return bad("nodes.params", "capabilities or concurrency key", "a sub-flow step is run by the daemon, not claimed by a worker")
	}
	cp.Lane, cp.MaxAttempts = store.SubflowLane, 1
	return nil
}

// checkChild validates a sub-flow node's child as its start will submit
// it (in the parent's namespace and version), and everything it nests;
// path holds the children being checked above it, so that a child that
// contains itself is a cycle rather than an endless descent.
func checkChild(parent ffdtype.SubmitFlowParams, n ffdtype.SubmitNode, lim leases.Limits, depth int, path []*ffdtype.SubmitFlowParams) error {
	if slices.Contains(path, n.Flow) {
		return fault.Invalid(ffdtype.KindCycle, "nodes.flow", n.Ref, "this sub-flow contains itself")
	}
	if depth+1 > MaxSubflowDepth {
		return fault.Invalid(ffdtype.KindOutOfRange, "nodes.flow", n.Ref, fmt.Sprintf("sub-flows nest at most %d deep", MaxSubflowDepth))
	}
	c := *n.Flow
	switch {
	case c.Flow.ID != uuid.Nil:
		return fault.Invalid(ffdtype.KindInvalidValue, "nodes.flow.id", c.Flow.ID.String(), "node "+n.Ref+": the engine names a child flow when it starts")
	case c.Flow.Namespace != "" && c.Flow.Namespace != parent.Flow.Namespace:
		return fault.Invalid(ffdtype.KindInvalidValue, "nodes.flow.namespace", c.Flow.Namespace, "node "+n.Ref+": a child runs in its parent's namespace")
	case c.Flow.Version != "" && c.Flow.Version != parent.Flow.Version:
		return fault.Invalid(ffdtype.KindInvalidValue, "nodes.flow.version", c.Flow.Version, "node "+n.Ref+": a child runs under its parent's version")
	}
	c.Flow.Namespace, c.Flow.Version = parent.Flow.Namespace, parent.Flow.Version
	if _, err := planSubmit(c, lim, depth+1, append(slices.Clip(path), n.Flow)); err != nil {
		return fmt.Errorf("node %s's flow: %w", n.Ref, err)
	}
	return nil
}

// EncodePayloads is p with every JSON value turned into payload bytes
// (leases.EncodePayload): its steps', their compensations', its
// on-failure step's and its sub-flows', nested ones too, for storing
// (a sub-flow's child, a schedule's or a trigger's flow). p itself is
// the caller's and is left as it is.
func EncodePayloads(p ffdtype.SubmitFlowParams) (ffdtype.SubmitFlowParams, error) {
	p.Nodes = slices.Clone(p.Nodes)
	enc := func(cp **ffdtype.CreateParams) error {
		if *cp == nil {
			return nil
		}
		c := **cp
		*cp = &c
		return leases.EncodePayload(&c)
	}
	if err := enc(&p.Flow.OnFailure); err != nil {
		return p, err
	}
	for i := range p.Nodes {
		n := &p.Nodes[i]
		if err := leases.EncodePayload(&n.Params); err != nil {
			return p, err
		}
		if err := enc(&n.Compensate); err != nil {
			return p, err
		}
		if n.Flow != nil {
			c, err := EncodePayloads(*n.Flow)
			if err != nil {
				return p, err
			}
			n.Flow = &c
		}
	}
	return p, nil
}

// encodeTemplate is a checked child's stored form.
func encodeTemplate(child ffdtype.SubmitFlowParams) (json.RawMessage, error) {
	c, err := EncodePayloads(child)
	if err != nil {
		return nil, err
	}
	c.Flow.ID, c.Flow.Namespace = uuid.Nil, ""
	return wire.EncodeFlow(c)
}

// StartSubflow starts a due sub-flow step: in one transaction it locks
// the step, submits its child on the parent's partition (or, for a rerun
// step, reruns the old child, carrying its completed steps over) and
// makes the step running under the engine's lease. A step that is no
// longer pending and due starts nothing (another daemon did, or it was
// cancelled). A step whose child already exists (it was revoked and
// came back) is taken again with the same child.
func StartSubflow(ctx context.Context, db store.DB, lim leases.Limits, step ffdtype.ExecutionID) (child *uuid.UUID, err error) {
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		child = nil
		m, err := store.NewLocks(tx).Execution(ctx, step)
		if errors.Is(err, pgx.ErrNoRows) || (err == nil && m.State != ffdtype.StatePending) {
			return nil
		}
		if err != nil {
			return err
		}
		s, err := store.GetSubflow(ctx, tx, step)
		if err != nil {
			return err
		}
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		id := s.Child
		if id == nil {
			if id, err = startChild(ctx, tx, lim, s); err != nil {
				return err
			}
		}
		if _, err := store.StartSubflowStep(ctx, tx, step, *id, now); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return errNotDue
			}
			return err
		}
		child = id
		return nil
	})
	if errors.Is(err, errNotDue) {
		return nil, nil
	}
	if err != nil {
		return nil, wrapOp("start sub-flow step "+step.String(), err)
	}
	return child, nil
}

// errNotDue rolls a start back whose step is not yet due.
var errNotDue = errors.New("the sub-flow step is not due")

// startChild submits a step's child in the parent's namespace and
// version, linked to the step.
func startChild(ctx context.Context, tx pgx.Tx, lim leases.Limits, s store.Subflow) (*uuid.UUID, error) {
	parent, err := store.GetFlow(ctx, tx, s.FlowID)
	if err != nil {
		return nil, flowErr("read", s.FlowID, err)
	}
	links := store.FlowLinks{Parent: &s.Step}
	if s.RerunOfChild != nil {
		res, err := rerunInTx(ctx, tx, lim, *s.RerunOfChild, links)
		var conflict *ffdtype.ConflictError
		switch {
		case err == nil:
			return &res.Flow.ID, nil
		case !errors.As(err, &conflict):
			return nil, err
		}
		// The old child cannot be rerun (it completed after all, or was
		// rerun already): the step starts a fresh child.
	}
	_, fp, err := wire.Decode(s.Template, wire.TargetFlow)
	if err != nil {
		return nil, err
	}
	fp.Flow.ID = ident.NewUUIDIn(s.Step.Partition)
	fp.Flow.Namespace, fp.Flow.Version = parent.Namespace, parent.Version
	sub, err := planSubmit(*fp, lim.AtLeast(MaxPayload(*fp)), 0, nil)
	if err != nil {
		return nil, fmt.Errorf("the stored child of sub-flow step %s: %w", s.Step, err)
	}
	res, err := sub.write(ctx, tx, links)
	if err != nil {
		return nil, err
	}
	return &res.Flow.ID, nil
}

// EndSubflow acts on a started sub-flow step whose step or child ended:
// it ends the step as its child ended (completed with the child's
// results, failed, or cancelled), or cancels the child of a step that
// ended first (cancel_all), then records that both have ended. Each
// change is its own transaction and fenced: a race with another daemon,
// or with a caller, changes nothing twice. acted says it changed
// something.
func EndSubflow(ctx context.Context, db store.DB, lim leases.Limits, e store.SubflowEnd) (acted bool, err error) {
	switch {
	case e.Child != nil && e.StepState == ffdtype.StateRunning && e.ChildState != ffdtype.FlowOpen:
		return endStep(ctx, db, lim, e)
	case e.Child != nil && e.StepState.Terminal() && e.ChildState == ffdtype.FlowOpen:
		if _, err := Cancel(ctx, db, *e.Child, ffdtype.CancelAll, ParentEndedReason); err != nil && !errors.Is(err, ffdtype.ErrAlreadyTerminal) {
			return false, fmt.Errorf("cancel sub-flow %s of step %s: %w", e.Child, e.Step, err)
		}
		return true, markEnded(ctx, db, e.Step)
	case e.StepState.Terminal():
		// Both ended; or the step ended before it started a child
		// (cancelled while it waited, skipped by its join).
		return true, markEnded(ctx, db, e.Step)
	}
	return false, nil // a step put back to pending: its start takes it again
}

// endStep ends a running sub-flow step as its child ended, and marks
// the pair ended, in one transaction.
func endStep(ctx context.Context, db store.DB, lim leases.Limits, e store.SubflowEnd) (bool, error) {
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		var err error
		switch e.ChildState {
		case ffdtype.FlowCompleted:
			var result []byte
			if result, err = childResult(ctx, tx, lim, *e.Child); err == nil {
				_, err = leases.Complete(ctx, tx, lim, e.Step, e.Epoch, result)
			}
		case ffdtype.FlowFailed:
			_, err = leases.Fail(ctx, tx, e.Step, e.Epoch, ffdtype.FailParams{Error: "sub-flow " + e.Child.String() + " failed"})
		default:
			_, err = leases.Cancel(ctx, tx, e.Step, SubflowCancelReason, LinkerBy)
		}
		if err != nil {
			return err
		}
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		return store.MarkSubflowEnded(ctx, tx, e.Step, now)
	})
	if errors.Is(err, ffdtype.ErrLeaseLost) || errors.Is(err, ffdtype.ErrAlreadyTerminal) {
		return false, nil // the step changed meanwhile: the next pass sees how
	}
	if err != nil {
		return false, fmt.Errorf("end sub-flow step %s as its child %s ended: %w", e.Step, e.Child, err)
	}
	return true, nil
}

func markEnded(ctx context.Context, db store.DB, step ffdtype.ExecutionID) error {
	return store.InTx(ctx, db, func(tx pgx.Tx) error {
		now, err := store.Now(ctx, tx)
		if err != nil {
			return err
		}
		return store.MarkSubflowEnded(ctx, tx, step, now)
	})
}

func childResult(ctx context.Context, db store.DB, lim leases.Limits, child uuid.UUID) ([]byte, error) {
	rs, err := store.FlowResults(ctx, db, child)
	if err != nil {
		return nil, err
	}
	out := ffdtype.SubflowResult{Flow: child, State: ffdtype.FlowCompleted, Results: make(map[string]json.RawMessage, len(rs))}
	for step, r := range rs {
		switch {
		case len(r) == 0:
			out.Results[step] = json.RawMessage("null")
		case json.Valid(r):
			out.Results[step] = r
		default:
			b, _ := json.Marshal(string(r))
			out.Results[step] = b
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	if lim.CheckPayload(len(b)) != nil {
		out.Results, out.Truncated = map[string]json.RawMessage{}, true
		return json.Marshal(out)
	}
	return b, nil
}
