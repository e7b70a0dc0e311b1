//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
)

// The workflows workload (docs/workflows.md): every linksEvery-th flow
// is, in turn, one of
//
//   - a sub-flow: pre → child (a sub-flow of a slow step and another)
//     → post; every other one is cancelled (cancel_all) at a random
//     moment, mid-way;
//   - a saga: five steps each with a compensation, then a step that
//     fails, and an on-failure step; the compensation of s3 fails its
//     first attempt;
//   - a flow of version v1 or v2 (the worker processes serve one
//     version each, or both when there is one process).
//
// And up to eventCount events are published, each twice, through the
// fault phase; a trigger starts a one-step flow for each.
//
// Ground truth: a sub-flow not cancelled completes, its step completed
// with its child completed; a cancelled one ends cancelled, its step
// ended, its child ended (cancelled, or completed before the cancel),
// and the step's end agrees with its child's. A saga fails, and its one
// compensation flow completes with the five compensations and the
// on-failure step, each completed, each compensation after the one of
// the step that followed its own, s3's after a failed attempt. A
// versioned flow completes with every attempt of every step run by a
// worker serving its version. Every event published fires once and
// starts one flow, which completes.
const (
	linksEvery   = 8
	linksSlot    = 2 // i%linksEvery: a slot the random DAGs had
	subflowKind  = "chaos.subflow"
	sagaKind     = "chaos.saga"
	versionKind  = "chaos.version"
	eventName    = "chaos.order"
	eventTrigger = "chaos-orders"
	// eventCount events are published, each twice.
	eventCount = 1000
	sagaSteps  = 5
)

// envVersions lists the versions a worker process serves, comma-separated.
const envVersions = "FFD_CHAOS_VERSIONS"

// versionsOf are the versions worker process i of n serves.
func versionsOf(i, n int) []string {
	if n == 1 {
		return []string{"v1", "v2"}
	}
	return []string{fmt.Sprint("v", 1+i%2)}
}

// linked is one flow of the workflows workload.
type linked struct {
	kind    string
	version string // a versioned flow's
	cancel  bool   // a sub-flow the harness cancels
	acked   bool
}

// links is what the workflows workload sent.
type links struct {
	mu     sync.Mutex
	flows  map[string]*linked
	events map[string]bool // event key → its second publication was acknowledged
	n      int
}

// setUpLinks announces the versions (the submitter may run before a
// worker of each has started) and creates the events' trigger.
func (h *harness) setUpLinks(ctx context.Context) error {
	client, err := ffd.NewClient(h.pool, nil)
	if err != nil {
		return err
	}
	if err := client.AnnounceVersions(ctx, "v1", "v2"); err != nil {
		return fmt.Errorf("announce versions: %w", err)
	}
	_, err = client.CreateTrigger(ctx, ffd.TriggerParams{Name: eventTrigger, Event: eventName, Flow: &ffd.SubmitFlowParams{
		Flow:  ffd.CreateFlowParams{Kind: "chaos.event"},
		Nodes: []ffd.SubmitNode{{Ref: "order", Params: nodeParams("e.order")}},
	}})
	return err
}

// submitLinked submits the next flow of the workflows workload.
func (h *harness) submitLinked(ctx context.Context, client *ffd.Client, rng *rand.Rand) {
	id := uuid.New()
	h.links.mu.Lock()
	turn := h.links.n
	h.links.n++
	h.links.mu.Unlock()
	var l *linked
	var p ffd.SubmitFlowParams
	switch turn % 4 {
	case 0, 1:
		l = &linked{kind: subflowKind, cancel: turn%4 == 1}
		p = subflowParams(id)
	case 2:
		l = &linked{kind: sagaKind}
		p = sagaParams(id)
	default:
		l = &linked{kind: versionKind, version: fmt.Sprint("v", 1+rng.IntN(2))}
		p = versionParams(id, l.version)
	}
	h.links.mu.Lock()
	h.links.flows[id.String()] = l
	h.links.mu.Unlock()
	if !h.submitFlow(ctx, client, p) {
		return
	}
	h.links.mu.Lock()
	l.acked = true
	h.links.mu.Unlock()
	if l.cancel {
		go h.cancelMidway(context.WithoutCancel(ctx), client, id, time.Duration(rng.IntN(800))*time.Millisecond)
	}
}

func subflowParams(id uuid.UUID) ffd.SubmitFlowParams {
	child := &ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "slow", Params: nodeParams("s.slow")}, {Ref: "last", Params: nodeParams("s.step")}},
		Edges: []ffd.SubmitEdge{{From: "slow", To: "last"}},
	}
	return ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: subflowKind},
		Nodes: []ffd.SubmitNode{{Ref: "pre", Params: nodeParams("s.step")}, {Ref: "child", Flow: child}, {Ref: "post", Params: nodeParams("s.step")}},
		Edges: []ffd.SubmitEdge{{From: "pre", To: "child"}, {From: "child", To: "post"}},
	}
}

func sagaParams(id uuid.UUID) ffd.SubmitFlowParams {
	report := nodeParams("g.report")
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: sagaKind, OnFailure: &report}}
	for i := 1; i <= sagaSteps+1; i++ {
		ref := fmt.Sprint("s", i)
		n := ffd.SubmitNode{Ref: ref, Params: nodeParams("g.do")}
		if i <= sagaSteps {
			undo := nodeParams("g.undo")
			n.Compensate = &undo
		} else {
			n.Params = nodeParams("g.boom")
		}
		p.Nodes = append(p.Nodes, n)
		if i > 1 {
			p.Edges = append(p.Edges, ffd.SubmitEdge{From: fmt.Sprint("s", i-1), To: ref})
		}
	}
	return p
}

func versionParams(id uuid.UUID, version string) ffd.SubmitFlowParams {
	return ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: versionKind, Version: version},
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: nodeParams("v.step")}, {Ref: "b", Params: nodeParams("v.step")}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	}
}

// cancelMidway cancels a sub-flow's parent after delay, retrying until
// acknowledged; a parent that ended first is left as it ended.
func (h *harness) cancelMidway(ctx context.Context, client *ffd.Client, id uuid.UUID, delay time.Duration) {
	time.Sleep(delay)
	for attempt := 0; attempt < 100; attempt++ {
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := client.CancelFlow(tctx, id, ffd.CancelAll, "chaos: cancelled mid-way")
		cancel()
		if err == nil || errors.Is(err, ffd.ErrAlreadyTerminal) {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.violation("cancel of sub-flow parent %s not acknowledged", id)
}

// publishEvents publishes up to eventCount events, each twice, spread
// over the fault phase, retrying each publication until it is
// acknowledged. It stops with the phase, as the submitter does: on a
// cluster too loaded to publish them all in time, publishing the rest
// after the last fault (sequentially, 2 minutes of it on Citus at a load
// near 35) was counted as drain.
func (h *harness) publishEvents(ctx context.Context) {
	client, err := ffd.NewClient(h.pool, nil)
	if err != nil {
		h.violation("publisher: %v", err)
		return
	}
	gap := h.cfg.Duration / eventCount
	for i := 0; i < eventCount && ctx.Err() == nil; i++ {
		key := fmt.Sprint("order-", i)
		for range 2 {
			for attempt := 0; ; attempt++ {
				tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				_, err := client.PublishEvent(tctx, ffd.PublishParams{Name: eventName, Key: key, Payload: []byte(`{"n":1}`)})
				cancel()
				if err == nil {
					break
				}
				if errors.Is(err, ffd.ErrValidation) || attempt > 200 {
					h.violation("publish event %s: %v", key, err)
					return
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		h.links.mu.Lock()
		h.links.events[key] = true
		h.links.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(gap):
		}
	}
}

// handleLinked runs a step of the workflows workload: s.slow takes 200
// to 700 ms (a cancel lands mid-way), g.undo fails the first attempt of
// s3's compensation, g.boom fails for good, g.report checks its failure;
// the rest succeed.
func handleLinked(ctx context.Context, job *ffd.Job) ([]byte, error) {
	switch job.Kind {
	case "s.slow":
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(time.Duration(200+rand.IntN(500)) * time.Millisecond):
		}
	case "g.undo":
		if job.Step == "s3" && job.Attempt == 1 {
			return nil, errors.New("chaos: the first attempt of s3's compensation fails")
		}
	case "g.boom":
		return nil, ffd.Permanent(errors.New("chaos: the saga's last step fails"))
	case "g.report":
		var f ffd.Failure
		if err := json.Unmarshal(job.Payload, &f); err != nil || len(f.Compensating) != sagaSteps {
			return nil, ffd.Permanent(fmt.Errorf("the on-failure step's payload %s: %v", job.Payload, err))
		}
	case "v.step":
		if !servesVersion(job.Version) {
			return nil, ffd.Permanent(fmt.Errorf("a step of version %s on a worker serving %s", job.Version, os.Getenv(envVersions)))
		}
	}
	return []byte(`"ok"`), nil
}

func servesVersion(v string) bool {
	return v != "" && strings.Contains(","+os.Getenv(envVersions)+",", ","+v+",")
}

// verifyLinks checks the ground truth of the workflows workload.
func (h *harness) verifyLinks(ctx context.Context, client *ffd.Client) {
	h.links.mu.Lock()
	flows := make(map[string]*linked, len(h.links.flows))
	for id, l := range h.links.flows {
		flows[id] = l
	}
	h.links.mu.Unlock()
	for id, l := range flows {
		out := h.outcome(ctx, client, l.kind, id, l.acked)
		if out == nil {
			continue
		}
		switch l.kind {
		case subflowKind:
			h.verifySubflow(ctx, client, id, l, out)
		case sagaKind:
			h.verifySaga(ctx, client, id, out)
		default:
			h.verifyVersioned(ctx, id, l, out)
		}
	}
	h.verifyEvents(ctx, client)
}

func (h *harness) verifySubflow(ctx context.Context, client *ffd.Client, id string, l *linked, out *ffd.FlowOutcome) {
	step := out.Steps["child"]
	child, err := client.ChildFlow(ctx, step.ID)
	if err != nil {
		h.violation("sub-flow %s: read its child: %v", id, err)
		return
	}
	h.mu.Lock()
	h.report.Subflows++
	if out.Flow.State == ffd.FlowCancelled {
		h.report.SubflowsCancelled++
	}
	h.mu.Unlock()
	switch {
	case !l.cancel && (out.Flow.State != ffd.FlowCompleted || step.State != ffd.StateCompleted || child == nil || child.State != ffd.FlowCompleted):
		h.violation("sub-flow %s: parent %s, step %s, child %+v; want all completed", id, out.Flow.State, step.State, child)
	case !step.State.Terminal() || (child != nil && child.State == ffd.FlowOpen):
		h.violation("sub-flow %s: step %s, child %+v; want both ended", id, step.State, child)
	case child == nil && step.State != ffd.StateCancelled:
		h.violation("sub-flow %s: step %s without a child; only a step cancelled before it started has none", id, step.State)
	case child != nil && child.State == ffd.FlowFailed:
		h.violation("sub-flow %s: its child failed", id)
	case child != nil && step.State == ffd.StateCompleted && child.State != ffd.FlowCompleted:
		h.violation("sub-flow %s: step completed, child %s", id, child.State)
	case child != nil && child.State == ffd.FlowCancelled && step.State != ffd.StateCancelled:
		h.violation("sub-flow %s: child cancelled, step %s", id, step.State)
	}
}

func (h *harness) verifySaga(ctx context.Context, client *ffd.Client, id string, out *ffd.FlowOutcome) {
	comp, err := client.Compensation(ctx, out.Flow.ID)
	if err != nil || comp == nil {
		h.violation("saga %s (%s): no compensation flow (%v)", id, out.Flow.State, err)
		return
	}
	h.mu.Lock()
	h.report.Sagas++
	h.mu.Unlock()
	if n, err := store.CompensationFlows(ctx, h.pool, out.Flow.ID); err != nil || n != 1 {
		h.violation("saga %s: %d compensation flows (%v); want 1", id, n, err)
	}
	done, err := client.WaitFlow(ctx, comp.Flow.ID)
	if err != nil || done.Flow.State != ffd.FlowCompleted || len(done.Members) != sagaSteps+1 || out.Flow.State != ffd.FlowFailed {
		h.violation("saga %s (%s): compensation flow %v with %v; want completed with %d steps", id, out.Flow.State, err, done, sagaSteps+1)
		return
	}
	for step, x := range done.Steps {
		if x.State != ffd.StateCompleted {
			h.violation("saga %s: compensation %s %s; want completed", id, step, x.State)
		}
	}
	if done.Steps["s3"].Attempt < 2 {
		h.violation("saga %s: s3's compensation took %d attempts; its first fails", id, done.Steps["s3"].Attempt)
	}
	for i := 1; i < sagaSteps; i++ {
		earlier, later := done.Steps[fmt.Sprint("s", i+1)], done.Steps[fmt.Sprint("s", i)]
		if later.StartedAt == nil || earlier.TerminalAt == nil || later.StartedAt.Before(*earlier.TerminalAt) {
			h.violation("saga %s: s%d's compensation started %v, before s%d's ended %v", id, i, later.StartedAt, i+1, earlier.TerminalAt)
		}
	}
	h.mu.Lock()
	h.report.Compensations += len(done.Members)
	h.mu.Unlock()
}

func (h *harness) verifyVersioned(ctx context.Context, id string, l *linked, out *ffd.FlowOutcome) {
	if out.Flow.State != ffd.FlowCompleted || out.Flow.Version != l.version {
		h.violation("%s flow %s: %s under version %q; want completed under %s", l.version, id, out.Flow.State, out.Flow.Version, l.version)
		return
	}
	workers, err := store.FlowAttemptWorkers(ctx, h.pool, out.Flow.ID)
	if err != nil {
		h.violation("%s flow %s: read its attempts: %v", l.version, id, err)
		return
	}
	for _, worker := range workers {
		var i int
		if _, err := fmt.Sscanf(worker, "worker-%d/", &i); err != nil || !strings.Contains(strings.Join(versionsOf(i-1, h.cfg.Workers), ","), l.version) {
			h.violation("%s flow %s: an attempt ran on %s, which serves %v", l.version, id, worker, versionsOf(i-1, h.cfg.Workers))
		}
	}
	h.mu.Lock()
	h.report.VersionedFlows++
	h.mu.Unlock()
}

// verifyEvents checks that every event published fired once and started
// one flow, which completed.
func (h *harness) verifyEvents(ctx context.Context, client *ffd.Client) {
	events, err := store.EventsNamed(ctx, h.pool, eventName)
	if err != nil {
		h.violation("read events: %v", err)
		return
	}
	seen := map[string]store.EventState{}
	for _, e := range events {
		if _, dup := seen[e.Key]; dup {
			h.violation("event %s stored twice", e.Key)
		}
		seen[e.Key] = e
	}
	h.links.mu.Lock()
	acked := make([]string, 0, len(h.links.events))
	for key := range h.links.events {
		acked = append(acked, key)
	}
	h.links.mu.Unlock()
	for _, key := range acked {
		e, ok := seen[key]
		if !ok || !e.Fired || e.Started != 1 {
			h.violation("event %s: stored %v, fired %v, started %d; want stored, fired, one flow", key, ok, e.Fired, e.Started)
			continue
		}
		f, err := client.DescribeFlow(ctx, ffd.TriggerFlowID(eventTrigger, e.ID))
		if err != nil || f.State != ffd.FlowCompleted {
			h.violation("event %s: its flow %v (%v); want completed", key, f, err)
		}
	}
	if flows, err := store.FlowsOfKind(ctx, h.pool, "chaos.event"); err != nil || flows != len(seen) {
		h.violation("%d event flows for %d events (%v); want one each", flows, len(seen), err)
	}
	h.mu.Lock()
	h.report.EventsFired = len(acked)
	h.mu.Unlock()
}
