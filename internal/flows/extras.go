package flows

import (
	"context"
	"encoding/json"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/wire"
)

// OnFailureStep names a flow's on-failure step in its compensation flow
// and in ff_compensation's records (” there). No step of a flow with an
// on-failure step may take the name.
const OnFailureStep = "ffd.on-failure"

// extras are what a submission writes beside its executions and edges:
// the templates of its sub-flow steps (by ref), its compensations
// (by step; OnFailureStep for the on-failure step). A submission that
// uses neither writes nothing more.
type extras struct {
	templates map[string]json.RawMessage
	comps     []store.NewCompensation
}

// memberVersion gives a member its flow's version; naming another is
// refused (a flow runs under one handler set).
func memberVersion(cp *ffdtype.CreateParams, version, ref string) error {
	if cp.Version != "" && cp.Version != version {
		return fault.Invalid(ffdtype.KindInvalidValue, "nodes.params.version", cp.Version,
			"node "+ref+": a flow's members run under the flow's version ("+version+"); set CreateFlowParams.Version")
	}
	cp.Version = version
	return nil
}

// planExtras checks and encodes a submission's sub-flows (each child
// checked whole, nested ones too), compensations and on-failure step.
func planExtras(p ffdtype.SubmitFlowParams, lim leases.Limits, depth int, path []*ffdtype.SubmitFlowParams) (*extras, error) {
	if err := leases.ValidateVersion("flow.version", p.Flow.Version); err != nil {
		return nil, err
	}
	ex := &extras{}
	for _, n := range p.Nodes {
		if n.Flow != nil {
			if err := checkChild(p, n, lim, depth, path); err != nil {
				return nil, err
			}
			t, err := encodeTemplate(*n.Flow)
			if err != nil {
				return nil, refine(err, n.Ref)
			}
			if ex.templates == nil {
				ex.templates = map[string]json.RawMessage{}
			}
			ex.templates[n.Ref] = t
		}
		if n.Compensate != nil {
			c, err := planCompensation(p, n.Ref, *n.Compensate, lim)
			if err != nil {
				return nil, err
			}
			ex.comps = append(ex.comps, c)
		}
	}
	if p.Flow.OnFailure == nil {
		return ex, nil
	}
	of := *p.Flow.OnFailure
	if len(of.Payload) > 0 || of.JSON != nil {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "flow.on_failure.payload", "", "the on-failure step's payload is the failure; leave it empty")
	}
	for _, n := range p.Nodes {
		if n.Ref == OnFailureStep {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.ref", n.Ref, "the name of the on-failure step; name this step otherwise")
		}
	}
	c, err := planCompensation(p, OnFailureStep, of, lim)
	if err != nil {
		return nil, err
	}
	ex.comps = append(ex.comps, c)
	return ex, nil
}

// planCompensation checks a compensating step as its compensation flow
// will create it, and encodes it.
func planCompensation(p ffdtype.SubmitFlowParams, step string, cp ffdtype.CreateParams, lim leases.Limits) (store.NewCompensation, error) {
	field := "nodes.compensate"
	if step == OnFailureStep {
		field = "flow.on_failure"
	}
	if cp.Step != "" {
		return store.NewCompensation{}, fault.Invalid(ffdtype.KindInvalidValue, field+".step", cp.Step, "a compensation takes the name of the step it compensates; leave step empty")
	}
	if cp.Namespace != "" && cp.Namespace != p.Flow.Namespace {
		return store.NewCompensation{}, fault.Invalid(ffdtype.KindInvalidValue, field+".namespace", cp.Namespace, "a compensation runs in its flow's namespace")
	}
	if err := memberVersion(&cp, p.Flow.Version, step); err != nil {
		return store.NewCompensation{}, err
	}
	if err := leases.EncodePayload(&cp); err != nil {
		return store.NewCompensation{}, refine(err, step)
	}
	check := cp
	check.Namespace, check.Step = p.Flow.Namespace, step
	part := ident.Partition(p.Flow.ID)
	if _, err := leases.Normalize(check, leases.Placement{FlowID: &p.Flow.ID, Partition: &part}, lim); err != nil {
		return store.NewCompensation{}, refine(err, step+" (compensation)")
	}
	raw, err := wire.EncodeExecution(cp)
	if err != nil {
		return store.NewCompensation{}, err
	}
	return store.NewCompensation{Step: step, Params: raw}, nil
}

// writeSpawned records the extras of steps spawned into f (xs, by
// ref): their sub-flows, and their compensations, which arm f.
func (ex *extras) writeSpawned(ctx context.Context, tx pgx.Tx, f *ffdtype.Flow, xs map[string]*ffdtype.Execution) error {
	if err := ex.writeRows(ctx, tx, f.ID, xs); err != nil {
		return err
	}
	if len(ex.comps) == 0 || f.Compensation == ffdtype.CompensationArmed {
		return nil
	}
	return store.ArmCompensation(ctx, tx, f.ID)
}

// writeRows records the sub-flow steps and compensations of flowID's
// new members xs, by ref.
func (ex *extras) writeRows(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, xs map[string]*ffdtype.Execution) error {
	if len(ex.templates) > 0 {
		rows := make([]store.NewSubflow, 0, len(ex.templates))
		for ref, t := range ex.templates {
			rows = append(rows, store.NewSubflow{Step: xs[ref].ID, Template: t})
		}
		if err := store.InsertSubflows(ctx, tx, flowID, rows); err != nil {
			return err
		}
	}
	if len(ex.comps) > 0 {
		return store.InsertCompensations(ctx, tx, flowID, ex.comps)
	}
	return nil
}

// write records the extras of a flow just written (res), with links
// (a child's parent) merged into the flow's own.
func (ex *extras) write(ctx context.Context, tx pgx.Tx, res *ffdtype.SubmittedFlow, links store.FlowLinks) error {
	if len(ex.comps) > 0 {
		links.Compensation = ffdtype.CompensationArmed
	}
	if err := ex.writeRows(ctx, tx, res.Flow.ID, res.Executions); err != nil {
		return err
	}
	if links.Zero() {
		return nil
	}
	if err := store.LinkFlow(ctx, tx, res.Flow.ID, links); err != nil {
		return err
	}
	res.Flow.Parent, res.Flow.Compensation, res.Flow.CompensationOf = links.Parent, links.Compensation, links.Compensates
	return nil
}
