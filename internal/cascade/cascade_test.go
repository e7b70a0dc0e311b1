package cascade_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct {
	*testdb.Fixture
	d *cascade.Dispatcher
}

// setup gives each test a database and a dispatcher, and checks the
// invariants over the whole database when the test ends.
func setup(t *testing.T) *fixture {
	t.Helper()
	tf := testdb.Checked(t, 5*time.Minute)
	return &fixture{Fixture: tf, d: cascade.New(tf.Pool, nil)}
}

type dag struct {
	flow *ffdtype.Flow
	x    map[string]*ffdtype.Execution
}

// submit builds a DAG from "a->b" edge strings, each node in its own lane.
func (f *fixture) submit(policies map[string]ffdtype.Policy, edges ...string) *dag {
	f.T.Helper()
	p := ffdtype.SubmitFlowParams{}
	seen := map[string]bool{}
	addNode := func(ref string) {
		if seen[ref] {
			return
		}
		seen[ref] = true
		n := ffdtype.SubmitNode{Ref: ref, Params: ffdtype.CreateParams{Lane: "n-" + uuid.NewString()[:8], MaxAttempts: 1}}
		if pol, ok := policies[ref]; ok {
			n.Policy = &pol
		}
		p.Nodes = append(p.Nodes, n)
	}
	for _, e := range edges {
		from, to, ok := strings.Cut(e, "->")
		if !ok {
			f.T.Fatalf("edge %q: want from->to", e)
		}
		addNode(from)
		addNode(to)
		p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: from, To: to})
	}
	res, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil {
		f.T.Fatal(err)
	}
	return &dag{flow: res.Flow, x: res.Executions}
}

// claim leases a node (it must be pending and due).
func (f *fixture) claim(g *dag, ref string) *ffdtype.Execution {
	f.T.Helper()
	got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: g.x[ref].Lane, Worker: "w/1", Max: 1})
	if err != nil || len(got) != 1 {
		f.T.Fatalf("claim %s: %v (%d claimed; state %s)", ref, err, len(got), f.state(g, ref))
	}
	return got[0]
}

func (f *fixture) finish(x *ffdtype.Execution, ok bool) {
	f.T.Helper()
	var err error
	if ok {
		_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil)
	} else {
		_, err = leases.Fail(f.Ctx, f.Pool, x.ID, x.LeaseEpoch, ffdtype.FailParams{Error: "no"})
	}
	if err != nil {
		f.T.Fatal(err)
	}
}

func (f *fixture) run(g *dag, ref string, ok bool) { f.finish(f.claim(g, ref), ok) }

func (f *fixture) state(g *dag, ref string) ffdtype.State {
	f.T.Helper()
	x, err := leases.Get(f.Ctx, f.Pool, g.x[ref].ID)
	if err != nil {
		f.T.Fatal(err)
	}
	return x.State
}

func (f *fixture) expect(g *dag, want map[string]ffdtype.State) {
	f.T.Helper()
	for ref, s := range want {
		if got := f.state(g, ref); got != s {
			f.T.Errorf("%s is %s, want %s", ref, got, s)
		}
	}
}

// drain dispatches and cancels siblings until nothing is left.
func (f *fixture) drain() (events int) {
	f.T.Helper()
	for {
		r, err := f.d.DispatchBatch(f.Ctx, 100, 0)
		if err != nil {
			f.T.Fatal(err)
		}
		groups, _, err := f.d.CancelSiblings(f.Ctx, 100)
		if err != nil {
			f.T.Fatal(err)
		}
		events += r.Events
		if r.Events == 0 && groups == 0 {
			return events
		}
	}
}

// crashing returns a dispatcher whose connection is killed, from another
// connection, when its transaction reaches step ("": the first step it
// reports); killed is where the killed backend's pid is written.
func (f *fixture) crashing(step string) (d *cascade.Dispatcher, killed *int) {
	f.T.Helper()
	killer, err := pgx.Connect(f.Ctx, f.DB.URL)
	if err != nil {
		f.T.Fatal(err)
	}
	f.T.Cleanup(func() { killer.Close(context.Background()) })
	killed = new(int)
	d = cascade.New(f.Pool, nil)
	d.SetStep(func(ctx context.Context, tx pgx.Tx, name string) error {
		if step != "" && name != step {
			return nil
		}
		if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(killed); err != nil {
			return err
		}
		_, err := killer.Exec(ctx, `SELECT pg_terminate_backend($1)`, *killed)
		return err
	})
	return d, killed
}

// waitGone waits until a terminated backend has exited (its transaction
// rolled back, its locks released).
func (f *fixture) waitGone(pid int) {
	f.T.Helper()
	deadline := time.Now().Add(time.Minute)
	for f.Count(`SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid) > 0 {
		if time.Now().After(deadline) {
			f.T.Fatalf("backend %d still there", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) quiescent() {
	f.T.Helper()
	if err := store.CheckQuiescent(f.Ctx, f.Pool); err != nil {
		f.T.Fatalf("invariants at rest: %v", err)
	}
}

// Scenario 1: all_of over three upstreams fires after the third success,
// not before.
func TestAllOfThree(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(nil, "a->d", "b->d", "c->d")
	for i, ref := range []string{"a", "b", "c"} {
		f.run(g, ref, true)
		f.drain()
		want := ffdtype.StateBlocked
		if i == 2 {
			want = ffdtype.StatePending
		}
		f.expect(g, map[string]ffdtype.State{"d": want})
	}
	f.run(g, "d", true)
	f.drain()
	f.quiescent()
	if fl, _ := flows.Get(f.Ctx, f.Pool, g.flow.ID); fl.State != ffdtype.FlowCompleted {
		t.Fatalf("flow %s, want completed", fl.State)
	}
}

// Scenario 2: any_of + cancel_remaining: the first success readies the
// downstream and queues the two running siblings, which the tick cancels
// and fences.
func TestAnyOfCancelRemaining(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.CancelRemaining}}, "a->d", "b->d", "c->d")
	a, b, c := f.claim(g, "a"), f.claim(g, "b"), f.claim(g, "c")
	f.finish(a, true)
	r, err := f.d.DispatchBatch(f.Ctx, 10, 0)
	if err != nil || r.Events != 1 || r.CancelGroups != 1 {
		t.Fatalf("dispatch: %+v %v; want one event and one queued cancel group", r, err)
	}
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StatePending, "b": ffdtype.StateRunning, "c": ffdtype.StateRunning})
	desc, _ := flows.Describe(f.Ctx, f.Pool, g.flow.ID)
	for _, grp := range desc.Groups {
		if len(grp.CancelMembers) != 2 {
			t.Fatalf("group records %d siblings to cancel, want 2", len(grp.CancelMembers))
		}
	}
	groups, cancelled, err := f.d.CancelSiblings(f.Ctx, 10)
	if err != nil || groups != 1 || cancelled != 2 {
		t.Fatalf("tick: %d groups %d cancelled %v", groups, cancelled, err)
	}
	f.expect(g, map[string]ffdtype.State{"b": ffdtype.StateCancelled, "c": ffdtype.StateCancelled})
	for _, x := range []*ffdtype.Execution{b, c} {
		if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil); err == nil {
			t.Fatalf("a cancelled sibling completed")
		}
		var reason, by string
		f.Pool.QueryRow(f.Ctx, `SELECT cancellation_reason, cancelled_by FROM ff_execution WHERE execution_id = $1`, x.ID.UUID).Scan(&reason, &by)
		if reason != cascade.SiblingCancelReason || by != cascade.SiblingCancelledBy {
			t.Fatalf("sibling cancelled with %q by %q", reason, by)
		}
		if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'revoked'`, x.ID.UUID); n != 1 {
			t.Fatalf("sibling has %d revoked lease events, want 1", n)
		}
	}
	// The tick again finds nothing; the siblings' events only move counters.
	if groups, _, _ := f.d.CancelSiblings(f.Ctx, 10); groups != 0 {
		t.Fatal("the tick found the group again")
	}
	f.drain()
	f.run(g, "d", true)
	f.drain()
	f.quiescent()
	desc, _ = flows.Describe(f.Ctx, f.Pool, g.flow.ID)
	if grp := desc.Groups[0]; grp.Counts.Success != 1 || grp.Counts.Fail != 2 || grp.Decision != ffdtype.DecisionSatisfied {
		t.Fatalf("group %+v", grp)
	}
}

// Scenario 3: quorum(2) + let_run: pending after two successes; the third
// keeps running and its completion only moves counters.
func TestQuorumLetRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.Quorum, K: 2, OnSatisfied: ffdtype.LetRun}}, "a->d", "b->d", "c->d")
	a, b, c := f.claim(g, "a"), f.claim(g, "b"), f.claim(g, "c")
	f.finish(a, true)
	f.drain()
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StateBlocked})
	f.finish(b, true)
	f.drain()
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StatePending, "c": ffdtype.StateRunning})
	if n := f.Count(`SELECT count(*) FROM ff_pending_cancel_group`); n != 0 {
		t.Fatal("let_run queued a cancel group")
	}
	f.finish(c, true)
	f.drain()
	desc, _ := flows.Describe(f.Ctx, f.Pool, g.flow.ID)
	if grp := desc.Groups[0]; grp.Counts.Success != 3 || grp.Decision != ffdtype.DecisionSatisfied {
		t.Fatalf("group %+v", grp)
	}
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StatePending})
}

// Scenario 4: quorum(3) of 5 with three failures: skipped.
func TestQuorumImpossible(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.Quorum, K: 3, OnSatisfied: ffdtype.LetRun}}, "a->d", "b->d", "c->d", "e->d", "h->d")
	f.run(g, "a", false)
	f.run(g, "b", false)
	f.drain()
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StateBlocked})
	f.run(g, "c", false)
	f.drain()
	f.expect(g, map[string]ffdtype.State{"d": ffdtype.StateSkipped})
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'skipped'`, g.x["d"].ID.UUID); n != 1 {
		t.Fatalf("%d skipped events, want 1", n)
	}
	f.run(g, "e", true)
	f.run(g, "h", true)
	f.drain()
	f.quiescent()
}

// A 200-deep all_of chain whose root fails: every downstream skipped, one
// completion event each, by repeated dispatch.
func TestDeepChainSkip(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var edges []string
	for i := range 199 {
		edges = append(edges, fmt.Sprintf("n%d->n%d", i, i+1))
	}
	g := f.submit(nil, edges...)
	f.run(g, "n0", false)
	if events := f.drain(); events != 200 {
		t.Fatalf("dispatched %d events, want 200 (root and 199 skips; the flow's own is born dispatched)", events)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state = 'skipped'`, g.flow.ID); n != 199 {
		t.Fatalf("%d skipped, want 199", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id = $1 AND outcome = 'skipped'`, g.flow.ID); n != 199 {
		t.Fatalf("%d skipped events, want 199", n)
	}
	if fl, _ := flows.Get(f.Ctx, f.Pool, g.flow.ID); fl.State != ffdtype.FlowFailed {
		t.Fatalf("flow %s, want failed", fl.State)
	}
	f.quiescent()
}

// The same event dispatched twice, and by four goroutines at once: its
// effects happen once.
func TestDuplicateDispatch(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.Quorum, K: 2, OnSatisfied: ffdtype.LetRun}}, "a->d", "b->d", "c->d")
	f.run(g, "a", true)
	var eventID int64
	f.Pool.QueryRow(f.Ctx, `SELECT event_id FROM ff_completion_event WHERE execution_id = $1`, g.x["a"].ID.UUID).Scan(&eventID)
	r1, err := f.d.Dispatch(f.Ctx, eventID)
	if err != nil || r1.Events != 1 || r1.EdgesResolved != 1 {
		t.Fatalf("first dispatch: %+v %v", r1, err)
	}
	r2, err := f.d.Dispatch(f.Ctx, eventID)
	if err != nil || r2.Events != 0 {
		t.Fatalf("second dispatch: %+v %v; want nothing", r2, err)
	}
	// Four at once on b's event.
	f.run(g, "b", true)
	f.Pool.QueryRow(f.Ctx, `SELECT event_id FROM ff_completion_event WHERE execution_id = $1`, g.x["b"].ID.UUID).Scan(&eventID)
	var wg sync.WaitGroup
	var dispatched, resolved atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := f.d.Dispatch(f.Ctx, eventID)
			if err != nil {
				t.Error(err)
			}
			dispatched.Add(int64(r.Events))
			resolved.Add(int64(r.EdgesResolved))
		}()
	}
	wg.Wait()
	if dispatched.Load() != 1 || resolved.Load() != 1 {
		t.Fatalf("four racing dispatches: %d events, %d edges; want 1 and 1", dispatched.Load(), resolved.Load())
	}
	desc, _ := flows.Describe(f.Ctx, f.Pool, g.flow.ID)
	if grp := desc.Groups[0]; grp.Counts.Success != 2 || grp.Decision != ffdtype.DecisionSatisfied {
		t.Fatalf("group %+v, want 2 successes, satisfied", grp)
	}
}

// A dispatch whose connection is killed mid-way leaves the event
// undispatched and no edge resolved; the redispatch completes it once.
func TestCrashMidDispatch(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"locked", "resolved", "marked"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			// A failure that skips d, which in turn has a downstream: the
			// dispatch resolves, decides, skips and writes an event.
			g := f.submit(nil, "a->d", "b->d", "d->e")
			f.run(g, "a", false)
			before := f.Count(`SELECT count(*) FROM ff_completion_event`)
			crashing, killed := f.crashing(step)
			if _, err := crashing.DispatchBatch(f.Ctx, 10, 0); err == nil {
				t.Fatal("dispatch survived the kill of its connection")
			}
			f.waitGone(*killed)
			if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NOT NULL`); n != 0 {
				t.Fatalf("%d events dispatched by a crashed dispatch", n)
			}
			if n := f.Count(`SELECT count(*) FROM ff_edge WHERE state = 'resolved'`); n != 0 {
				t.Fatalf("%d edges resolved by a crashed dispatch", n)
			}
			if n := f.Count(`SELECT count(*) FROM ff_completion_event`); n != before {
				t.Fatalf("a crashed dispatch left %d events behind", n-before)
			}
			f.expect(g, map[string]ffdtype.State{"d": ffdtype.StateBlocked})
			f.drain()
			f.expect(g, map[string]ffdtype.State{"d": ffdtype.StateSkipped, "e": ffdtype.StateSkipped})
			if n := f.Count(`SELECT count(*) FROM ff_edge WHERE state = 'resolved'`); n != 2 {
				t.Fatalf("%d edges resolved after redispatch, want 2 (a->d, d->e)", n)
			}
		})
	}
}

// A sibling-cancel tick killed mid-group is finished by the next; nothing
// is cancelled twice.
func TestCrashMidSiblingCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	g := f.submit(map[string]ffdtype.Policy{"d": {Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.CancelRemaining}}, "a->d", "b->d", "c->d")
	a := f.claim(g, "a")
	f.claim(g, "b")
	f.finish(a, true)
	if _, err := f.d.DispatchBatch(f.Ctx, 10, 0); err != nil {
		t.Fatal(err)
	}
	crashing, killed := f.crashing("")
	if _, _, err := crashing.CancelSiblings(f.Ctx, 10); err == nil {
		t.Fatal("tick survived the kill")
	}
	// The killed backend releases its locks when it has exited, not when
	// pg_terminate_backend returns.
	f.waitGone(*killed)
	f.expect(g, map[string]ffdtype.State{"b": ffdtype.StateRunning, "c": ffdtype.StatePending})
	groups, cancelled, err := f.d.CancelSiblings(f.Ctx, 10)
	if err != nil || groups != 1 || cancelled != 2 {
		t.Fatalf("next tick: %d groups, %d cancelled, %v", groups, cancelled, err)
	}
	f.drain()
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE outcome = 'cancelled'`); n != 2 {
		t.Fatalf("%d cancelled events, want 2", n)
	}
	f.quiescent()
}

// Events with nothing to cascade, a solo execution's and a flow's own,
// are written already dispatched: the dispatcher has nothing to do for
// them, and only b's event (an edge's upstream) waits for it.
func TestSoloAndFlowEventsAreBornDispatched(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "solo"}); err != nil {
		t.Fatal(err)
	}
	got, _ := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "solo", Worker: "w/1", Max: 1})
	f.finish(got[0], true)
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id IS NULL AND dispatched_at IS NOT NULL`); n != 1 {
		t.Fatalf("%d solo events born dispatched, want 1", n)
	}
	g := f.submit(nil, "a->b")
	f.run(g, "a", true)
	f.drain()
	f.run(g, "b", true)
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`); n != 1 {
		t.Fatalf("%d events wait for the dispatcher, want b's alone", n)
	}
	if events := f.drain(); events != 1 {
		t.Fatalf("dispatched %d, want b's event alone", events)
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id = $1 AND execution_id IS NULL AND outcome = 'completed' AND dispatched_at IS NOT NULL`, g.flow.ID); n != 1 {
		t.Fatalf("%d finished-flow events born dispatched, want 1", n)
	}
	f.quiescent()
}
