//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
)

// The durable workload: every durableEvery-th flow is a small durable
// workflow instead of a random DAG. Its steps, by kind:
//
//   - d.spawn.K adds K children (d.child) into the join at run time, with
//     its completion (Job.Spawn, MapInto);
//   - d.sleep sleeps once (Sleep), then completes;
//   - d.gate waits for the signal "go" (WaitForSignal), which the
//     harness sends to the flow at a random moment after the submission,
//     before or after the wait begins, and completes with its payload;
//   - d.join waits for all of them, spawned children included, and
//     fails for good unless it sees every upstream with its result.
//
// Ground truth: every durable flow completes with all 4+K members
// completed, and its gate was woken by the harness's signal.
const (
	durableEvery = 4
	durableKind  = "chaos.durable"
	gateSignal   = "go"
	// gateTimeout ends a gate's wait without its signal: a lost signal
	// shows as a failed gate (a violation), not as a flow left open.
	gateTimeout = 3 * time.Minute
)

// durable is one durable flow the submitter sent.
type durable struct {
	children    int
	acked       bool // the submission was acknowledged
	signalAcked bool // the signal to its gate was acknowledged
}

// durableParams is a durable flow: spawner, sleeper and gate, all into
// the join.
func durableParams(id uuid.UUID, children int) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: durableKind}}
	for _, n := range []struct{ ref, kind string }{
		{"spawn", fmt.Sprintf("d.spawn.%d", children)}, {"sleep", "d.sleep"}, {"gate", "d.gate"}, {"join", "d.join"},
	} {
		p.Nodes = append(p.Nodes, ffd.SubmitNode{Ref: n.ref, Params: nodeParams(n.kind)})
	}
	for _, from := range []string{"spawn", "sleep", "gate"} {
		p.Edges = append(p.Edges, ffd.SubmitEdge{From: from, To: "join"})
	}
	return p
}

// signalGate sends the gate's signal to flow id after a random delay,
// retrying until it is acknowledged; it is refused only by a finished
// flow, which a gate without its signal cannot make.
func (h *harness) signalGate(ctx context.Context, client *ffd.Client, id uuid.UUID, d *durable, delay time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(delay):
	}
	for attempt := 0; ; attempt++ {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_, err := client.Signal(tctx, ffd.SignalParams{FlowID: &id, Name: gateSignal, Payload: []byte(id.String())})
		cancel()
		if err == nil {
			h.mu.Lock()
			d.signalAcked = true
			h.report.Signals++
			h.mu.Unlock()
			return
		}
		var done *ffd.AlreadyTerminalError
		if errors.As(err, &done) || errors.Is(err, ffd.ErrValidation) {
			h.violation("signal to flow %s refused: %v", id, err)
			return
		}
		// A signal whose commit was lost to a fault may have landed:
		// sending again would leave a second one kept, which the
		// verification allows (it counts the gate's wake, not signals).
		if attempt > 100 {
			h.violation("signal to flow %s not acknowledged after %d tries: %v", id, attempt, err)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// handleDurable runs a durable workflow's step.
func handleDurable(ctx context.Context, job *ffd.Job) ([]byte, error) {
	switch {
	case strings.HasPrefix(job.Kind, "d.spawn."):
		n, err := strconv.Atoi(strings.TrimPrefix(job.Kind, "d.spawn."))
		if err != nil {
			return nil, ffd.Permanent(err)
		}
		items := make([]ffd.CreateParams, n)
		for i := range items {
			items[i] = nodeParams("d.child")
		}
		if err := job.Spawn(ffd.MapInto("child", items, "join")); err != nil {
			return nil, ffd.Permanent(err)
		}
		return []byte(`"spawned"`), nil
	case job.Kind == "d.child":
		return []byte(`"child"`), nil
	case job.Kind == "d.sleep":
		w, err := job.Wake(ctx)
		if err != nil {
			return nil, err
		}
		if w == nil {
			return nil, ffd.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
		}
		return []byte(`"slept"`), nil
	case job.Kind == "d.gate":
		w, err := job.Wake(ctx)
		if err != nil {
			return nil, err
		}
		if w == nil {
			return nil, ffd.WaitForSignal(gateSignal, gateTimeout)
		}
		if w.Received == nil {
			return nil, ffd.Permanent(fmt.Errorf("the gate's wait ended by its %s, not by the signal", w.Reason))
		}
		return []byte(strconv.Quote(string(w.Received.Payload))), nil
	case job.Kind == "d.join":
		us, err := job.Upstreams(ctx)
		if err != nil {
			return nil, err
		}
		for _, u := range us {
			if u.State != ffdtype.StateCompleted || len(u.Result) == 0 {
				return nil, ffd.Permanent(fmt.Errorf("upstream %s is %s with %d result bytes", u.Step, u.State, len(u.Result)))
			}
		}
		return []byte(strconv.Itoa(len(us))), nil
	}
	return nil, ffd.Permanent(fmt.Errorf("unknown kind %q", job.Kind))
}

// outcome waits briefly for the flow id of the workload named what and
// returns its outcome; nil when it is not in the database (a violation
// if its submission was acknowledged) or cannot be read.
func (h *harness) outcome(ctx context.Context, client *ffd.Client, what, id string, acked bool) *ffd.FlowOutcome {
	fid := uuid.MustParse(id)
	if _, err := client.DescribeFlow(ctx, fid); errors.Is(err, ffd.ErrNotFound) {
		if acked {
			h.violation("%s flow %s was acknowledged but is not in the database", what, id)
		}
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	out, err := client.WaitFlow(wctx, fid)
	cancel()
	if err != nil {
		h.violation("%s flow %s: %v", what, id, err)
		return nil
	}
	return out
}

// verifyDurable checks every durable flow's ground truth.
func (h *harness) verifyDurable(ctx context.Context, client *ffd.Client) {
	h.mu.Lock()
	flows := make(map[string]*durable, len(h.durable))
	for id, d := range h.durable {
		flows[id] = d
	}
	h.mu.Unlock()
	for id, d := range flows {
		out := h.outcome(ctx, client, "durable", id, d.acked)
		if out == nil {
			continue
		}
		h.mu.Lock()
		h.report.DurableFlows++
		h.report.Spawned += max(len(out.Members)-4, 0)
		h.mu.Unlock()
		if out.Flow.State != ffd.FlowCompleted || len(out.Members) != 4+d.children {
			h.violation("durable flow %s: %s with %d members; want completed with %d", id, out.Flow.State, len(out.Members), 4+d.children)
			continue
		}
		for _, x := range out.Members {
			if x.State != ffd.StateCompleted {
				h.violation("durable flow %s step %s: %s (%s); want completed", id, x.Step, x.State, x.LastError)
			}
		}
		if got := string(out.Steps["join"].Result); got != strconv.Itoa(3+d.children) {
			h.violation("durable flow %s: the join saw %s upstreams; want %d", id, got, 3+d.children)
		}
		w, err := client.Wake(ctx, out.Steps["gate"].ID)
		if err != nil || w == nil || w.Received == nil || string(w.Received.Payload) != id {
			h.violation("durable flow %s: the gate's wake %+v (%v); want the harness's signal", id, w, err)
		}
	}
}
