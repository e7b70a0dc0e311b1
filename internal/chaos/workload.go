//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/oracle"
	"github.com/flowfabric/ffd/internal/store"
)

// submitted is one DAG the submitter sent.
type submitted struct {
	dag   *oracle.DAG
	acked bool // the submission (or a retry of it) was acknowledged
}

// nodeParams are the execution parameters of every node: enough attempts
// and a short lease, so that killed workers, lapsed leases and lost
// completions are retried until the node's planned outcome lands.
func nodeParams(kind string) ffd.CreateParams {
	return ffd.CreateParams{Lane: Lane, Kind: kind, MaxAttempts: 100, LeaseTTL: 3 * time.Second,
		Retry: ffd.RetryPolicy{Base: 50 * time.Millisecond, Max: time.Second, Multiplier: 2}}
}

func dagParams(id uuid.UUID, d *oracle.DAG) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: "chaos"}}
	for i := range d.Preds {
		node := ffd.SubmitNode{Ref: fmt.Sprint("n", i), Params: nodeParams(kindOf(i, d.Succeeds[i]))}
		if len(d.Preds[i]) > 0 {
			pol := d.Policies[i]
			node.Policy = &ffd.Policy{Kind: ffd.PolicyKind(pol.Kind), K: pol.K, OnSatisfied: ffd.OnSatisfied(pol.OnSatisfied)}
		}
		p.Nodes = append(p.Nodes, node)
		for _, pr := range d.Preds[i] {
			p.Edges = append(p.Edges, ffd.SubmitEdge{From: fmt.Sprint("n", pr), To: fmt.Sprint("n", i)})
		}
	}
	return p
}

// submit sends random DAGs until ctx ends. A submission that fails is
// retried with the same flow id, which makes it idempotent: a retry of a
// submission that did commit reports a conflict with the existing flow.
func (h *harness) submit(ctx context.Context) {
	client, err := ffd.NewClient(h.pool, nil)
	if err != nil {
		h.violation("submitter: %v", err)
		return
	}
	// Its own generator: the DAGs do not depend on the fault schedule.
	rng := rand.New(rand.NewPCG(h.cfg.Seed, 1))
	var signals sync.WaitGroup
	defer signals.Wait()
	for i := 0; ctx.Err() == nil; i++ {
		if i%durableEvery == durableEvery-1 {
			h.submitDurable(ctx, client, rng, &signals)
			continue
		}
		if i%keyedEvery == 1 {
			h.submitKeyed(ctx, client, rng)
			continue
		}
		if i%linksEvery == linksSlot {
			h.submitLinked(ctx, client, rng)
			continue
		}
		n := h.cfg.MinNodes + rng.IntN(h.cfg.MaxNodes-h.cfg.MinNodes+1)
		d := oracle.Random(rng, n, rng.IntN(4) == 0)
		id := uuid.New()
		s := &submitted{dag: d}
		h.mu.Lock()
		h.flows[id.String()] = s
		h.report.Flows++
		h.mu.Unlock()
		if h.submitFlow(ctx, client, dagParams(id, d)) {
			h.mu.Lock()
			s.acked = true
			h.report.FlowsAcked++
			h.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(h.cfg.FlowEvery):
		}
	}
}

// submitFlow submits p, retrying with the same flow id, which makes it
// idempotent: a retry of a submission that did commit reports a
// conflict with the existing flow. It reports whether the submission was
// acknowledged. Each try is bounded; the last one may run past the phase
// so that few submissions are left unacknowledged.
func (h *harness) submitFlow(ctx context.Context, client *ffd.Client, p ffd.SubmitFlowParams) bool {
	for attempt := 0; ; attempt++ {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := client.SubmitFlow(tctx, p)
		cancel()
		var conflict *ffd.ConflictError
		if err == nil || errors.As(err, &conflict) {
			return true
		}
		if errors.Is(err, ffd.ErrValidation) {
			h.violation("submitter: flow %s refused: %v", p.Flow.ID, err)
			return false
		}
		if ctx.Err() != nil && attempt > 0 {
			return false
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// submitDurable submits one durable workflow (durable.go) with up to 20
// children to spawn, and has its gate's signal sent after a random delay
// of up to a second: before the gate waits, or after.
func (h *harness) submitDurable(ctx context.Context, client *ffd.Client, rng *rand.Rand, signals *sync.WaitGroup) {
	id := uuid.New()
	d := &durable{children: 1 + rng.IntN(20)}
	delay := time.Duration(rng.IntN(1000)) * time.Millisecond
	h.mu.Lock()
	h.durable[id.String()] = d
	h.mu.Unlock()
	if !h.submitFlow(ctx, client, durableParams(id, d.children)) {
		return
	}
	h.mu.Lock()
	d.acked = true
	h.mu.Unlock()
	signals.Add(1)
	go func() {
		defer signals.Done()
		// The signal goes out even after the fault phase: a gate left
		// without one would wait for its timeout.
		h.signalGate(context.WithoutCancel(ctx), client, id, d, delay)
	}()
	select {
	case <-ctx.Done():
	case <-time.After(h.cfg.FlowEvery):
	}
}

// progressLog samples the number of completion events over time.
type progressLog struct {
	mu      sync.Mutex
	samples []sample
}

type sample struct {
	at    time.Time
	count int64
}

func (l *progressLog) add(s sample) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.samples = append(l.samples, s)
}

// grew reports whether the count grew between from and to, and when
// first after from.
func (l *progressLog) grew(from, to time.Time) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var base int64 = -1
	for _, s := range l.samples {
		if s.at.Before(from) {
			base = s.count
			continue
		}
		if s.at.After(to) {
			break
		}
		if base >= 0 && s.count > base {
			return s.at, true
		}
		if base < 0 {
			base = s.count
		}
	}
	return time.Time{}, false
}

// monitor samples progress every 100 ms (paced); samples fail while
// Postgres is down and are simply missing then.
func (h *harness) monitor(ctx context.Context) {
	paced(ctx, 100*time.Millisecond, func() {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		n, _, err := store.EventCounts(qctx, h.pool)
		cancel()
		if err == nil {
			h.progress.add(sample{at: time.Now(), count: n})
		}
	})
}

// drain waits until nothing is left to run, dispatch or cancel.
func (h *harness) drain(ctx context.Context) {
	h.mu.Lock()
	from := h.lastFault
	h.mu.Unlock()
	if from.IsZero() {
		from = time.Now()
	}
	deadline := time.Now().Add(h.cfg.DrainTimeout)
	var left string
	said := time.Now()
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start := time.Now()
		o, err := store.ReadOutstanding(qctx, h.pool)
		took := time.Since(start)
		cancel()
		if err == nil && o == (store.Outstanding{}) {
			h.report.Drain = time.Since(from)
			h.cfg.Logf("chaos: drained %s after the last fault", h.report.Drain.Round(10*time.Millisecond))
			return
		}
		left = fmt.Sprintf("%d live executions, %d undispatched events, %d cancel groups, %d open flows, %d sub-flows, compensations and events to act on (err %v)",
			o.Live, o.Undispatched, o.CancelGroups, o.OpenFlows, o.Links, err)
		// Every progress line and the verdict name the lanes, so that a
		// drain that stalls says where, and whether on time or on work.
		if time.Since(said) >= 10*time.Second {
			said = time.Now()
			h.cfg.Logf("chaos: draining, %s after the last fault: %s%s", time.Since(from).Round(time.Second), left, h.lanesLeft(ctx))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			h.violation("not drained %s after the faults: %s%s", h.cfg.DrainTimeout, left, h.lanesLeft(ctx))
			return
		}
		time.Sleep(pace(100*time.Millisecond, took))
	}
}

// lanesLeft lists the live executions by lane and state, each part
// after "; " (nothing when the read fails: it only explains).
func (h *harness) lanesLeft(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	live, err := store.LiveByLane(qctx, h.pool)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, d := range live {
		b.WriteString("; " + d.String())
	}
	return b.String()
}

// verify checks the invariants and every DAG's ground truth.
func (h *harness) verify(ctx context.Context) {
	if err := store.CheckQuiescent(ctx, h.pool); err != nil {
		h.violation("invariants: %v", err)
	}
	type node struct {
		index int
		state ffdtype.State
	}
	byFlow := map[string][]node{}
	members, err := store.FlowMemberStates(ctx, h.pool)
	if err != nil {
		h.violation("read executions: %v", err)
		return
	}
	for _, m := range members {
		if !strings.HasPrefix(m.Kind, "n") {
			h.report.Executions++
			continue // a durable, keyed or workflows flow's: verifyDurable, verifyKeyed and verifyLinks check them
		}
		i, err := strconv.Atoi(strings.TrimPrefix(strings.SplitN(m.Kind, ".", 2)[0], "n"))
		if err != nil {
			h.violation("execution of flow %s has an unknown kind %q", m.FlowID, m.Kind)
			continue
		}
		byFlow[m.FlowID] = append(byFlow[m.FlowID], node{i, m.State})
		h.report.Executions++
	}
	completions, leases, err := store.EventCounts(ctx, h.pool)
	if err != nil {
		h.violation("count events: %v", err)
	}
	h.report.Events = int(completions + leases)
	if client, err := ffd.NewClient(h.pool, nil); err != nil {
		h.violation("verify: %v", err)
	} else {
		h.verifyDurable(ctx, client)
		h.verifyKeyed(ctx, client)
		h.verifyLinks(ctx, client)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, s := range h.flows {
		nodes, found := byFlow[id]
		delete(byFlow, id)
		if !found {
			if s.acked {
				h.report.Violations = append(h.report.Violations, fmt.Sprintf("flow %s was acknowledged but is not in the database", id))
			}
			continue
		}
		if len(nodes) != len(s.dag.Preds) {
			h.report.Violations = append(h.report.Violations, fmt.Sprintf("flow %s has %d executions, its DAG %d", id, len(nodes), len(s.dag.Preds)))
			continue
		}
		if !s.dag.Deterministic() {
			continue // cancel_remaining: the invariants cover the order-dependent end
		}
		want := s.dag.Expected()
		for _, n := range nodes {
			if n.state != want[n.index] {
				h.report.Violations = append(h.report.Violations, fmt.Sprintf("flow %s node n%d (%v over %v): %s, want %s",
					id, n.index, s.dag.Policies[n.index], s.dag.Preds[n.index], n.state, want[n.index]))
			}
		}
	}
	for id := range byFlow {
		h.report.Violations = append(h.report.Violations, fmt.Sprintf("flow %s is in the database but was never submitted", id))
	}
}
