package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
)

// saga is a chain of n steps, each with a compensation, ending in a step
// of kind last, with an on-failure step.
func saga(n int, last string) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{OnFailure: &ffd.CreateParams{Lane: "saga", Kind: "report"}}}
	prev := ""
	for i := 1; i <= n+1; i++ {
		ref := fmt.Sprintf("s%d", i)
		node := ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: "saga", Kind: "do"}}
		if i <= n {
			node.Compensate = &ffd.CreateParams{Lane: "saga", Kind: "undo", MaxAttempts: 3, Retry: ffd.RetryPolicy{Base: 10 * time.Millisecond, Max: 20 * time.Millisecond}}
		} else {
			node.Params.Kind = last
		}
		p.Nodes = append(p.Nodes, node)
		if prev != "" {
			p.Edges = append(p.Edges, ffd.SubmitEdge{From: prev, To: ref})
		}
		prev = ref
	}
	return p
}

// sagaLog records the compensations and on-failure steps that ran, in
// order; undo fails the first attempt of the step named failOnce.
type sagaLog struct {
	mu       sync.Mutex
	undone   []string
	attempts map[string]int
	reports  []ffd.Failure
}

func (l *sagaLog) kinds(failOnce string) *ffd.Kinds {
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "do", func(ctx context.Context, job *ffd.Job) ([]byte, error) { return []byte("done"), nil })
	ffd.HandleBytes(kinds, "boom", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		return nil, ffd.Permanent(errors.New("boom"))
	})
	ffd.HandleBytes(kinds, "undo", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.attempts[job.Step]++
		if job.Step == failOnce && l.attempts[job.Step] == 1 {
			return nil, errors.New("the refund service is down")
		}
		l.undone = append(l.undone, job.Step)
		return nil, nil
	})
	ffd.HandleBytes(kinds, "report", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		var f ffd.Failure
		if err := json.Unmarshal(job.Payload, &f); err != nil {
			return nil, ffd.Permanent(err)
		}
		l.mu.Lock()
		l.reports = append(l.reports, f)
		l.mu.Unlock()
		return nil, nil
	})
	return kinds
}

// A chain of 5 compensated steps whose sixth step fails: the five
// compensations run once each, last step first, one of them after a
// failed first attempt; the on-failure step runs once with the failure;
// the flow records its compensation flow.
func TestCompensationChainRunsInReverse(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	log := &sagaLog{attempts: map[string]int{}}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"saga"}, Kinds: log.kinds("s3"), Concurrency: 4, PollInterval: 20 * time.Millisecond})
	sub, err := f.client.SubmitFlow(f.Ctx, saga(5, "boom"))
	if err != nil {
		t.Fatal(err)
	}
	if sub.Flow.Compensation != ffd.CompensationArmed {
		t.Fatalf("a flow with compensations is %q; want armed", sub.Flow.Compensation)
	}
	comp := f.waitCompensation(sub.Flow.ID)
	out, err := f.client.WaitFlow(f.Ctx, comp.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if out.Flow.State != ffd.FlowCompleted || out.Flow.CompensationOf == nil || *out.Flow.CompensationOf != sub.Flow.ID {
		t.Fatalf("compensation flow %s compensating %v; want completed, compensating %s", out.Flow.State, out.Flow.CompensationOf, sub.Flow.ID)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if want := []string{"s5", "s4", "s3", "s2", "s1"}; !slices.Equal(log.undone, want) {
		t.Fatalf("compensations ran %v; want %v, each once", log.undone, want)
	}
	if log.attempts["s3"] != 2 {
		t.Fatalf("s3's compensation ran %d attempts; want 2 (one failed)", log.attempts["s3"])
	}
	if len(log.reports) != 1 || log.reports[0].Flow != sub.Flow.ID || log.reports[0].State != ffd.FlowFailed ||
		len(log.reports[0].Failed) != 1 || log.reports[0].Failed[0].Step != "s6" || len(log.reports[0].Compensating) != 5 {
		t.Fatalf("on-failure reports %+v; want one, for the failed flow, naming s6 failed and 5 compensating", log.reports)
	}
	again, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
	if err != nil {
		t.Fatal(err)
	}
	if again.Compensation != ffd.CompensationStarted || again.CompensationFlow == nil || *again.CompensationFlow != comp.Flow.ID {
		t.Fatalf("the flow records compensation %q by %v; want started by %s", again.Compensation, again.CompensationFlow, comp.Flow.ID)
	}
	if _, err := f.client.RerunFlow(f.Ctx, sub.Flow.ID); !errors.Is(err, ffd.ErrConflict) {
		t.Fatalf("rerun of a compensated flow: %v; want a conflict", err)
	}
	f.checkInvariants()
}

// A flow that completes runs no compensation and is disarmed.
func TestCompensationNotNeeded(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	log := &sagaLog{attempts: map[string]int{}}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"saga"}, Kinds: log.kinds(""), Concurrency: 4, PollInterval: 20 * time.Millisecond})
	sub, err := f.client.SubmitFlow(f.Ctx, saga(3, "do"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.WaitFlow(f.Ctx, sub.Flow.ID); err != nil {
		t.Fatal(err)
	}
	for {
		fl, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
		if err != nil {
			t.Fatal(err)
		}
		if fl.Compensation == ffd.CompensationNotNeeded {
			break
		}
		if fl.Compensation != ffd.CompensationArmed {
			t.Fatalf("a completed flow's compensation is %q; want not_needed", fl.Compensation)
		}
		select {
		case <-f.Ctx.Done():
			t.Fatal("the daemon did not disarm the completed flow within the test's budget")
		case <-time.After(20 * time.Millisecond):
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.undone) != 0 || len(log.reports) != 0 {
		t.Fatalf("a completed flow ran compensations %v and reports %v; want none", log.undone, log.reports)
	}
}

// waitCompensation waits until the daemon started a flow's compensations.
func (f *fixture) waitCompensation(flowID uuid.UUID) *ffd.SubmittedFlow {
	f.T.Helper()
	for {
		c, err := f.client.Compensation(f.Ctx, flowID)
		if err != nil {
			f.T.Fatal(err)
		}
		if c != nil {
			return c
		}
		select {
		case <-f.Ctx.Done():
			f.T.Fatalf("the daemon did not start the compensations of %s within the test's budget", flowID)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
