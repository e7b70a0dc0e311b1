package flows_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct{ *testdb.Fixture }

func setup(t *testing.T) *fixture { return &fixture{testdb.Checked(t, 3*time.Minute)} }

func (f *fixture) flow() *ffdtype.Flow {
	f.T.Helper()
	fl, existed, err := flows.CreateFlow(f.Ctx, f.Pool, ffdtype.CreateFlowParams{Kind: "test"})
	if err != nil || existed {
		f.T.Fatalf("create flow: %v (existed %v)", err, existed)
	}
	return fl
}

// member creates a pending member in a lane of its own, so that tests can
// claim exactly it.
func (f *fixture) member(fl *ffdtype.Flow) ffdtype.ExecutionID {
	f.T.Helper()
	x, _, err := flows.CreateMember(f.Ctx, f.Pool, leases.Limits{}, fl.ID, ffdtype.CreateParams{Lane: "m-" + uuid.NewString()})
	if err != nil {
		f.T.Fatalf("create member: %v", err)
	}
	return x.ID
}

// soloOn creates a solo execution minted on partition part (as a rerun
// is), outside any flow.
func (f *fixture) soloOn(part int16) *ffdtype.Execution {
	f.T.Helper()
	n, err := leases.Normalize(ffdtype.CreateParams{Lane: "x"}, leases.Placement{Partition: &part}, leases.Limits{})
	if err != nil {
		f.T.Fatal(err)
	}
	x, _, err := leases.Insert(f.Ctx, f.Pool, n)
	if err != nil {
		f.T.Fatal(err)
	}
	return x
}

func (f *fixture) revision(fl *ffdtype.Flow) int64 {
	f.T.Helper()
	got, err := flows.Get(f.Ctx, f.Pool, fl.ID)
	if err != nil {
		f.T.Fatal(err)
	}
	return got.GraphRevision
}

func (f *fixture) stage(fl *ffdtype.Flow, up, down ffdtype.ExecutionID) *ffdtype.Edge {
	f.T.Helper()
	res, err := flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: up, Downstream: down, ExpectedRevision: f.revision(fl)})
	if err != nil {
		f.T.Fatalf("stage %s -> %s: %v", up, down, err)
	}
	return res.Edge
}

func (f *fixture) link(fl *ffdtype.Flow, up, down ffdtype.ExecutionID) *ffdtype.ApplyResult {
	f.T.Helper()
	e := f.stage(fl, up, down)
	res, err := flows.Apply(f.Ctx, f.Pool, fl.ID, e.ID)
	if err != nil {
		f.T.Fatalf("apply %s: %v", e.ID, err)
	}
	return res
}

// runAndEnd claims id (it must be the only due execution of its lane) and
// completes or fails it.
func (f *fixture) runAndEnd(id ffdtype.ExecutionID, succeed bool) {
	f.T.Helper()
	x, err := leases.Get(f.Ctx, f.Pool, id)
	if err != nil {
		f.T.Fatal(err)
	}
	got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: x.Lane, Worker: "w/1", Max: 1})
	if err != nil || len(got) != 1 || got[0].ID != id {
		f.T.Fatalf("claim %s: %v (%d claimed)", id, err, len(got))
	}
	if succeed {
		_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, id, got[0].LeaseEpoch, nil)
	} else {
		_, err = leases.Fail(f.Ctx, f.Pool, id, got[0].LeaseEpoch, ffdtype.FailParams{Error: "no"})
	}
	if err != nil {
		f.T.Fatal(err)
	}
}

func (f *fixture) state(id ffdtype.ExecutionID) ffdtype.State {
	f.T.Helper()
	x, err := leases.Get(f.Ctx, f.Pool, id)
	if err != nil {
		f.T.Fatal(err)
	}
	return x.State
}

// graphRows counts what a refused graph change must not have written.
func (f *fixture) graphRows(fl *ffdtype.Flow) string {
	f.T.Helper()
	var s string
	err := f.Pool.QueryRow(f.Ctx, `SELECT (SELECT count(*) FROM ff_edge WHERE flow_id = $1) || '/' ||
		(SELECT count(*) FROM ff_edge_group WHERE flow_id = $1) || '/' ||
		(SELECT graph_revision || ':' || edge_count || ':' || node_count FROM ff_flow WHERE flow_id = $1)`, fl.ID).Scan(&s)
	if err != nil {
		f.T.Fatal(err)
	}
	return s
}

func TestCreateFlowIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	id := ident.NewUUID()
	a, existed, err := flows.CreateFlow(f.Ctx, f.Pool, ffdtype.CreateFlowParams{ID: id, Namespace: "ns", Kind: "etl"})
	if err != nil || existed || a.State != ffdtype.FlowOpen || a.Partition != ident.Partition(id) {
		t.Fatalf("create: %+v existed=%v err=%v", a, existed, err)
	}
	b, existed, err := flows.CreateFlow(f.Ctx, f.Pool, ffdtype.CreateFlowParams{ID: id, Namespace: "ns", Kind: "etl"})
	if err != nil || !existed || b.ID != id || !b.CreatedAt.Equal(a.CreatedAt) {
		t.Fatalf("repeat: existed=%v err=%v", existed, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_flow`); n != 1 {
		t.Fatalf("%d flows, want 1", n)
	}
	if _, _, err := flows.CreateFlow(f.Ctx, f.Pool, ffdtype.CreateFlowParams{Namespace: "bad ns"}); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("bad namespace: %v", err)
	}
}

func TestAddExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl := f.flow()
	// A solo execution minted on the flow's partition can join.
	part := fl.Partition
	solo := f.soloOn(part)
	res, err := flows.AddExecution(f.Ctx, f.Pool, fl.ID, solo.ID)
	if err != nil || res.AlreadyMember || res.NodeCount != 1 {
		t.Fatalf("add: %+v %v", res, err)
	}
	res, err = flows.AddExecution(f.Ctx, f.Pool, fl.ID, solo.ID)
	if err != nil || !res.AlreadyMember || res.NodeCount != 1 {
		t.Fatalf("add again: %+v %v; want already member", res, err)
	}
	// A member of another flow on the same partition: only membership
	// differs.
	var twin *ffdtype.Flow
	for {
		twin = f.flow()
		if twin.Partition == part {
			break
		}
	}
	inTwin, _, err := flows.CreateMember(f.Ctx, f.Pool, leases.Limits{}, twin.ID, ffdtype.CreateParams{Lane: "x"})
	if err != nil {
		t.Fatal(err)
	}
	var ce *ffdtype.ConflictError
	if _, err := flows.AddExecution(f.Ctx, f.Pool, fl.ID, inTwin.ID); !errors.As(err, &ce) || ce.Existing != twin.ID {
		t.Fatalf("member of another flow: %v, want a conflict carrying flow %s", err, twin.ID)
	}
	// Minted on another partition.
	foreign := ident.NewExecutionIDIn((part + 1) % 256)
	var ve *ffdtype.ValidationError
	if _, err := flows.AddExecution(f.Ctx, f.Pool, fl.ID, foreign); !errors.As(err, &ve) || ve.Kind != ffdtype.KindNotMember {
		t.Fatalf("execution on another partition: %v, want a not_member validation error", err)
	}
	// Missing flow, missing execution.
	missingFlow := ident.NewUUID()
	for ident.Partition(missingFlow) != part {
		missingFlow = ident.NewUUID()
	}
	another := f.soloOn(part)
	if _, err := flows.AddExecution(f.Ctx, f.Pool, missingFlow, another.ID); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("missing flow: %v, want not found", err)
	}
	if _, err := flows.AddExecution(f.Ctx, f.Pool, fl.ID, ident.NewExecutionIDIn(part)); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("missing execution: %v, want not found", err)
	}
	// Terminal flow.
	if _, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, ffdtype.CancelFlowOnly, ""); err != nil {
		t.Fatal(err)
	}
	var te *ffdtype.AlreadyTerminalError
	if _, err := flows.AddExecution(f.Ctx, f.Pool, fl.ID, another.ID); !errors.As(err, &te) || te.State != "cancelled" {
		t.Fatalf("terminal flow: %v, want already terminal", err)
	}
	if _, _, err := flows.CreateMember(f.Ctx, f.Pool, leases.Limits{}, fl.ID, ffdtype.CreateParams{Lane: "x"}); !errors.Is(err, ffdtype.ErrAlreadyTerminal) {
		t.Fatalf("create member of terminal flow: %v", err)
	}
}

func TestStageRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl := f.flow()
	a, b := f.member(fl), f.member(fl)
	rev := f.revision(fl)
	before := f.graphRows(fl)
	tests := []struct {
		name string
		p    ffdtype.StageEdgeParams
		is   error
	}{
		{"stale revision", ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: b, ExpectedRevision: rev - 1}, ffdtype.ErrStaleRevision},
		{"self edge", ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: a, ExpectedRevision: rev}, ffdtype.ErrValidation},
		{"non-member on partition", ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: ident.NewExecutionIDIn(fl.Partition), ExpectedRevision: rev}, ffdtype.ErrNotFound},
		{"other partition", ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: ident.NewExecutionIDIn((fl.Partition + 7) % 256), ExpectedRevision: rev}, ffdtype.ErrValidation},
		{"missing flow", ffdtype.StageEdgeParams{FlowID: ident.NewUUID(), Upstream: a, Downstream: b}, nil},
	}
	for _, tt := range tests {
		_, err := flows.Stage(f.Ctx, f.Pool, tt.p)
		if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.is)
		}
	}
	var se *ffdtype.StaleRevisionError
	_, err := flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: b, ExpectedRevision: rev + 5})
	if !errors.As(err, &se) || se.Current != rev || se.Expected != rev+5 {
		t.Fatalf("stale: %v, want current %d", err, rev)
	}
	// A solo execution on the flow's partition is not a member.
	part := fl.Partition
	solo := f.soloOn(part)
	var ve *ffdtype.ValidationError
	if _, err := flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: solo.ID, ExpectedRevision: rev}); !errors.As(err, &ve) || ve.Kind != ffdtype.KindNotMember {
		t.Fatalf("non-member: %v, want not_member", err)
	}
	if got := f.graphRows(fl); got != before {
		t.Fatalf("refused stagings wrote something: %s, was %s", got, before)
	}
	// Duplicate: a conflict carrying the existing edge, by pair and by id.
	e := f.stage(fl, a, b)
	var ce *ffdtype.ConflictError
	_, err = flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: a, Downstream: b, ExpectedRevision: f.revision(fl)})
	if !errors.As(err, &ce) || ce.Existing.(*ffdtype.Edge).ID != e.ID {
		t.Fatalf("duplicate pair: %v, want a conflict carrying edge %s", err, e.ID)
	}
	c := f.member(fl)
	_, err = flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, EdgeID: e.ID, Upstream: b, Downstream: c, ExpectedRevision: f.revision(fl)})
	if !errors.As(err, &ce) || ce.Existing.(*ffdtype.Edge).ID != e.ID {
		t.Fatalf("duplicate id: %v, want a conflict carrying edge %s", err, e.ID)
	}
	// Terminal flow.
	if _, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, ffdtype.CancelFlowOnly, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: b, Downstream: c, ExpectedRevision: f.revision(fl)}); !errors.Is(err, ffdtype.ErrAlreadyTerminal) {
		t.Fatalf("terminal flow: %v", err)
	}
}

func TestCycles(t *testing.T) {
	t.Parallel()
	t.Run("three nodes", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		fl := f.flow()
		a, b, c := f.member(fl), f.member(fl), f.member(fl)
		f.stage(fl, a, b)
		f.stage(fl, b, c)
		before := f.graphRows(fl)
		_, err := flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: c, Downstream: a, ExpectedRevision: f.revision(fl)})
		var ve *ffdtype.ValidationError
		if !errors.As(err, &ve) || ve.Kind != ffdtype.KindCycle {
			t.Fatalf("closing a 3-cycle: %v, want a cycle error", err)
		}
		if got := f.graphRows(fl); got != before {
			t.Fatalf("refused cycle wrote something: %s, was %s", got, before)
		}
	})
	t.Run("500 nodes", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		res, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, chainSpec(500))
		if err != nil {
			t.Fatal(err)
		}
		fl := res.Flow
		first, last := res.Executions["n0"].ID, res.Executions["n499"].ID
		before := f.graphRows(fl)
		_, err = flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: last, Downstream: first, ExpectedRevision: fl.GraphRevision})
		if !errors.Is(err, ffdtype.ErrValidation) {
			t.Fatalf("closing a 500-cycle: %v", err)
		}
		if got := f.graphRows(fl); got != before {
			t.Fatalf("refused cycle wrote something")
		}
	})
	t.Run("racing", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		for round := range 10 {
			fl := f.flow()
			a, b, c := f.member(fl), f.member(fl), f.member(fl)
			f.stage(fl, a, b)
			// b -> c and c -> a are each fine; together they close a cycle.
			var wg sync.WaitGroup
			errs := make([]error, 2)
			pairs := [][2]ffdtype.ExecutionID{{b, c}, {c, a}}
			for i, p := range pairs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Each retries on a stale revision, as a real client would.
					for {
						rev, err := flows.Get(f.Ctx, f.Pool, fl.ID)
						if err != nil {
							errs[i] = err
							return
						}
						_, err = flows.Stage(f.Ctx, f.Pool, ffdtype.StageEdgeParams{FlowID: fl.ID, Upstream: p[0], Downstream: p[1], ExpectedRevision: rev.GraphRevision})
						if !errors.Is(err, ffdtype.ErrStaleRevision) {
							errs[i] = err
							return
						}
					}
				}()
			}
			wg.Wait()
			ok := 0
			for _, err := range errs {
				var ve *ffdtype.ValidationError
				switch {
				case err == nil:
					ok++
				case errors.As(err, &ve) && ve.Kind == ffdtype.KindCycle:
				default:
					t.Fatalf("round %d: unexpected error %v", round, err)
				}
			}
			if ok != 1 {
				t.Fatalf("round %d: %d of the two racing stagings succeeded, want exactly 1", round, ok)
			}
			if n := f.Count(`SELECT count(*) FROM ff_edge WHERE flow_id = $1`, fl.ID); n != 2 {
				t.Fatalf("round %d: %d edges, want 2", round, n)
			}
		}
	})
}

func chainSpec(n int) ffdtype.SubmitFlowParams {
	p := ffdtype.SubmitFlowParams{}
	for i := range n {
		p.Nodes = append(p.Nodes, ffdtype.SubmitNode{Ref: fmt.Sprint("n", i), Params: ffdtype.CreateParams{Lane: "chain"}})
		if i > 0 {
			p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: fmt.Sprint("n", i-1), To: fmt.Sprint("n", i)})
		}
	}
	return p
}

func TestApply(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl := f.flow()
	a, b, d := f.member(fl), f.member(fl), f.member(fl)
	e1, e2 := f.stage(fl, a, d), f.stage(fl, b, d)
	if f.state(d) != ffdtype.StatePending {
		t.Fatal("staging alone must not block the downstream")
	}
	r1, err := flows.Apply(f.Ctx, f.Pool, fl.ID, e1.ID)
	if err != nil || r1.AlreadyApplied || r1.Unsatisfied != 1 || r1.Group.Counts.Total != 1 {
		t.Fatalf("apply e1: %+v %v; want unsatisfied 1", r1, err)
	}
	if f.state(d) != ffdtype.StateBlocked {
		t.Fatalf("downstream %s after apply, want blocked", f.state(d))
	}
	r2, err := flows.Apply(f.Ctx, f.Pool, fl.ID, e2.ID)
	if err != nil || r2.Unsatisfied != 2 {
		t.Fatalf("apply e2: %+v %v; want unsatisfied 2", r2, err)
	}
	again, err := flows.Apply(f.Ctx, f.Pool, fl.ID, e2.ID)
	if err != nil || !again.AlreadyApplied || again.Group.Counts.Total != 2 {
		t.Fatalf("apply e2 again: %+v %v; want already applied, total still 2", again, err)
	}
	if _, err := flows.Apply(f.Ctx, f.Pool, fl.ID, ident.NewUUID()); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("apply missing edge: %v", err)
	}
	// Refused for a running downstream.
	x, y := f.member(fl), f.member(fl)
	eRun := f.stage(fl, x, y)
	yx, _ := leases.Get(f.Ctx, f.Pool, y)
	if got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: yx.Lane, Worker: "w/1", Max: 1}); err != nil || len(got) != 1 {
		t.Fatalf("claim y: %v", err)
	}
	before := f.graphRows(fl)
	if _, err := flows.Apply(f.Ctx, f.Pool, fl.ID, eRun.ID); !errors.Is(err, ffdtype.ErrConflict) {
		t.Fatalf("apply to running downstream: %v, want conflict", err)
	}
	if got := f.graphRows(fl); got != before || f.state(y) != ffdtype.StateRunning {
		t.Fatalf("refused apply changed something")
	}
}

func TestApplyRefusedForTerminalDownstreamAndDecidedGroup(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl := f.flow()
	a, d := f.member(fl), f.member(fl)
	ed := f.stage(fl, a, d)
	if _, err := leases.Cancel(f.Ctx, f.Pool, d, "", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := flows.Apply(f.Ctx, f.Pool, fl.ID, ed.ID); !errors.Is(err, ffdtype.ErrAlreadyTerminal) {
		t.Fatalf("apply to cancelled downstream: %v", err)
	}
	// Decided group: any_of satisfied by a finished upstream, then another edge.
	fl2 := f.flow()
	u1, u2, down := f.member(fl2), f.member(fl2), f.member(fl2)
	if _, err := flows.SetPolicy(f.Ctx, f.Pool, fl2.ID, down, ffdtype.Policy{Kind: ffdtype.AnyOf}); err != nil {
		t.Fatal(err)
	}
	f.runAndEnd(u1, true)
	e1, e2 := f.stage(fl2, u1, down), f.stage(fl2, u2, down)
	if r, err := flows.Apply(f.Ctx, f.Pool, fl2.ID, e1.ID); err != nil || r.Group.Decision != ffdtype.DecisionSatisfied {
		t.Fatalf("apply from finished upstream: %+v %v", r, err)
	}
	var ce *ffdtype.ConflictError
	if _, err := flows.Apply(f.Ctx, f.Pool, fl2.ID, e2.ID); !errors.As(err, &ce) {
		t.Fatalf("apply into a decided group: %v, want conflict", err)
	}
}

// An edge applied to an upstream that has already finished resolves at
// once and decides the group as the policy says.
func TestApplyToFinishedUpstream(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		policy   ffdtype.Policy
		succeed  bool
		decision ffdtype.Decision
		state    ffdtype.State
	}{
		{"all_of completed", ffdtype.Policy{Kind: ffdtype.AllOf}, true, ffdtype.DecisionSatisfied, ffdtype.StatePending},
		{"all_of failed", ffdtype.Policy{Kind: ffdtype.AllOf}, false, ffdtype.DecisionImpossible, ffdtype.StateSkipped},
		{"any_of completed", ffdtype.Policy{Kind: ffdtype.AnyOf}, true, ffdtype.DecisionSatisfied, ffdtype.StatePending},
		{"any_of failed", ffdtype.Policy{Kind: ffdtype.AnyOf}, false, ffdtype.DecisionImpossible, ffdtype.StateSkipped},
		{"quorum 1 completed", ffdtype.Policy{Kind: ffdtype.Quorum, K: 1}, true, ffdtype.DecisionSatisfied, ffdtype.StatePending},
		{"quorum 1 failed", ffdtype.Policy{Kind: ffdtype.Quorum, K: 1}, false, ffdtype.DecisionImpossible, ffdtype.StateSkipped},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			fl := f.flow()
			up, down := f.member(fl), f.member(fl)
			if _, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, down, tt.policy); err != nil {
				t.Fatal(err)
			}
			f.runAndEnd(up, tt.succeed)
			e := f.stage(fl, up, down)
			res, err := flows.Apply(f.Ctx, f.Pool, fl.ID, e.ID)
			if err != nil || !res.Resolved || res.Group.Decision != tt.decision {
				t.Fatalf("apply: %+v %v; want resolved and %s", res, err, tt.decision)
			}
			if got := f.state(down); got != tt.state {
				t.Fatalf("downstream %s, want %s", got, tt.state)
			}
			edge, _ := flows.DescribeEdge(f.Ctx, f.Pool, fl.ID, e.ID)
			want := ffdtype.OutcomeSuccess
			if !tt.succeed {
				want = ffdtype.OutcomeFailed
			}
			if edge.State != ffdtype.EdgeResolved || edge.ResolvedOutcome != want {
				t.Fatalf("edge %s %q, want resolved %s", edge.State, edge.ResolvedOutcome, want)
			}
			if tt.state == ffdtype.StateSkipped {
				if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'skipped'`, down.UUID); n != 1 {
					t.Fatalf("%d skipped events, want 1", n)
				}
			}
		})
	}
}

func TestSetPolicy(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl := f.flow()
	a, d := f.member(fl), f.member(fl)
	bad := []ffdtype.Policy{{Kind: ffdtype.Quorum, K: 0}, {Kind: "most_of"}, {Kind: ffdtype.AllOf, K: 2}, {Kind: ffdtype.AnyOf, OnSatisfied: "explode"}, {Kind: ffdtype.AllOf, OnSatisfied: ffdtype.LetRun}}
	for _, p := range bad {
		if _, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, p); !errors.Is(err, ffdtype.ErrValidation) {
			t.Errorf("policy %+v: %v, want validation error", p, err)
		}
	}
	q := ffdtype.Policy{Kind: ffdtype.Quorum, K: 2, OnSatisfied: ffdtype.CancelRemaining}
	if already, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, q); err != nil || already {
		t.Fatalf("set: %v %v", already, err)
	}
	if already, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, q); err != nil || !already {
		t.Fatalf("restate: %v %v; want a no-op success", already, err)
	}
	// Changing before any edge is staged is allowed.
	if _, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, ffdtype.Policy{Kind: ffdtype.AnyOf}); err != nil {
		t.Fatal(err)
	}
	f.stage(fl, a, d)
	if _, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, q); !errors.Is(err, ffdtype.ErrConflict) {
		t.Fatalf("set after staging: %v, want conflict", err)
	}
	if already, err := flows.SetPolicy(f.Ctx, f.Pool, fl.ID, d, ffdtype.Policy{Kind: ffdtype.AnyOf}); err != nil || !already {
		t.Fatalf("restate after staging: %v %v; want a no-op success", already, err)
	}
	desc, err := flows.Describe(f.Ctx, f.Pool, fl.ID)
	if err != nil || len(desc.Groups) != 1 || desc.Groups[0].Policy.Kind != ffdtype.AnyOf || desc.Groups[0].Policy.OnSatisfied != ffdtype.LetRun {
		t.Fatalf("describe: %+v %v", desc, err)
	}
}

func TestListsAndDescribe(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ids []uuid.UUID
	for range 7 {
		ids = append(ids, f.flow().ID)
	}
	var got []uuid.UUID
	var after *uuid.UUID
	for {
		page, err := flows.List(f.Ctx, f.Pool, ffdtype.ListFlowsParams{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		for _, fl := range page.Flows {
			got = append(got, fl.ID)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if fmt.Sprint(got) != fmt.Sprint(ids) {
		t.Fatalf("paged flows %v, want %v", got, ids)
	}
	if _, err := flows.List(f.Ctx, f.Pool, ffdtype.ListFlowsParams{Limit: -1}); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("negative limit: %v", err)
	}
	if _, err := flows.List(f.Ctx, f.Pool, ffdtype.ListFlowsParams{Limit: 1 << 30}); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("limit over the maximum: %v, want a ValidationError", err)
	}
	if page, err := flows.List(f.Ctx, f.Pool, ffdtype.ListFlowsParams{Limit: flows.MaxListLimit}); err != nil || len(page.Flows) != 7 {
		t.Fatalf("largest limit: %v", err)
	}

	fl := f.flow()
	a, b, c := f.member(fl), f.member(fl), f.member(fl)
	eab, eac := f.stage(fl, a, b), f.stage(fl, a, c)
	ebc := f.stage(fl, b, c)
	out, err := flows.ListEdges(f.Ctx, f.Pool, fl.ID, a, flows.Outgoing)
	if err != nil || len(out) != 2 {
		t.Fatalf("outgoing of a: %d %v", len(out), err)
	}
	in, err := flows.ListEdges(f.Ctx, f.Pool, fl.ID, c, flows.Incoming)
	if err != nil || len(in) != 2 || !(in[0].ID == eac.ID && in[1].ID == ebc.ID) {
		t.Fatalf("incoming of c: %v %v", in, err)
	}
	if _, err := flows.ListEdges(f.Ctx, f.Pool, fl.ID, c, "sideways"); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("bad direction: %v", err)
	}
	e, err := flows.DescribeEdge(f.Ctx, f.Pool, fl.ID, eab.ID)
	if err != nil || e.Upstream != a || e.Downstream != b || e.State != ffdtype.EdgeStaged || e.DependencyKind != flows.DefaultDependencyKind {
		t.Fatalf("describe edge: %+v %v", e, err)
	}
	desc, err := flows.Describe(f.Ctx, f.Pool, fl.ID)
	if err != nil || desc.NodeCount != 3 || desc.EdgeCount != 3 || desc.GraphRevision != 6 {
		t.Fatalf("describe flow: %+v %v; want 3 nodes, 3 edges, revision 6", desc, err)
	}
}
