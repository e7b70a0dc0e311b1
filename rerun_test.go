package ffd_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// runs counts handler runs by step, for the flow each ran in.
type runs struct {
	mu sync.Mutex
	by map[string]int // "flow/step"
}

func (r *runs) add(j *ffd.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.by[j.FlowID.String()+"/"+j.Step]++
}

func (r *runs) of(flow ffd.SubmittedFlow, step string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[flow.Flow.ID.String()+"/"+step]
}

// A rerun of a failed flow runs again only what did not succeed: the
// steps that completed keep their results and never run, the failed step
// and everything skipped behind it run, and the rerun completes; the
// first run stays as it ended. A flow is rerun once; a completed one not
// at all.
func TestRerunFlow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	seen := &runs{by: map[string]int{}}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"rerun"}, PollInterval: 50 * time.Millisecond,
		Handler: func(_ context.Context, j *ffd.Job) ([]byte, error) {
			seen.add(j)
			if j.Step == "scan" && j.RerunOf == nil {
				return nil, ffd.Permanent(errors.New("scanner down"))
			}
			return []byte(`"` + j.Step + ` done"`), nil
		}})
	node := func(ref string) ffd.SubmitNode {
		return ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: "rerun"}}
	}
	first, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Flow:  ffd.CreateFlowParams{Kind: "ingest"},
		Nodes: []ffd.SubmitNode{node("fetch"), node("parse"), node("scan"), node("report"), node("publish")},
		Edges: []ffd.SubmitEdge{{From: "fetch", To: "parse"}, {From: "fetch", To: "scan"}, {From: "scan", To: "report"},
			{From: "parse", To: "publish"}, {From: "report", To: "publish"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the first run to fail", func() bool { return f.flowState(*first) == ffd.FlowFailed })

	second, err := f.client.RerunFlow(f.Ctx, first.Flow.ID)
	if err != nil {
		t.Fatalf("RerunFlow: %v", err)
	}
	if second.Flow.RerunOf == nil || *second.Flow.RerunOf != first.Flow.ID {
		t.Fatalf("rerun's RerunOf = %v, want %s", second.Flow.RerunOf, first.Flow.ID)
	}
	// The rerun shares its original's partition: the index allowing one
	// rerun leads with partition_key.
	if second.Executions["fetch"].ID.Partition != first.Executions["fetch"].ID.Partition {
		t.Fatalf("rerun on partition %d, its original on %d; want one partition", second.Executions["fetch"].ID.Partition, first.Executions["fetch"].ID.Partition)
	}
	for _, step := range []string{"fetch", "parse"} {
		x := second.Executions[step]
		if x.State != ffd.StateCompleted || x.Attempt != 0 || string(x.Result) != `"`+step+` done"` {
			t.Fatalf("carried %s: %s, attempt %d, result %s; want completed at attempt 0 with the first run's result", step, x.State, x.Attempt, x.Result)
		}
	}
	f.WaitFor("the rerun to complete", func() bool { return f.flowState(*second) == ffd.FlowCompleted })
	for step, want := range map[string]int{"fetch": 0, "parse": 0, "scan": 1, "report": 1, "publish": 1} {
		if got := seen.of(*second, step); got != want {
			t.Errorf("rerun ran %s %d times, want %d", step, got, want)
		}
	}
	for step, want := range map[string]ffd.State{"fetch": ffd.StateCompleted, "scan": ffd.StateFailed, "report": ffd.StateSkipped, "publish": ffd.StateSkipped} {
		if x, err := f.client.Get(f.Ctx, first.Executions[step].ID); err != nil || x.State != want {
			t.Errorf("first run's %s is %v (%v) after the rerun, want %s", step, x.State, err, want)
		}
	}

	_, err = f.client.RerunFlow(f.Ctx, first.Flow.ID)
	var ce *ffd.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("second rerun of the same flow: %v; want a ConflictError", err)
	}
	if got, ok := ce.Existing.(*ffd.Flow); !ok || got.ID != second.Flow.ID {
		t.Fatalf("the conflict carries %T %v; want the rerun flow %s", ce.Existing, ce.Existing, second.Flow.ID)
	}
	if _, err := f.client.RerunFlow(f.Ctx, second.Flow.ID); !errors.As(err, &ce) {
		t.Fatalf("rerun of a completed flow: %v; want a ConflictError", err)
	}
	f.WaitFor("the cascade to drain", func() bool {
		return f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`) == 0
	})
	if err := store.CheckQuiescent(f.Ctx, f.Pool); err != nil {
		t.Fatalf("invariants after a rerun: %v", err)
	}
}

// A failed solo execution reruns as a new execution linked to it, once;
// live, completed and flow-member executions are refused.
func TestRerunExecution(t *testing.T) {
	t.Parallel()
	f := setup(t)
	created, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "solo-rerun", Kind: "charge", Payload: []byte(`{"amount":5}`), MaxAttempts: 1, IdempotencyKey: "charge-7"})
	if err != nil {
		t.Fatal(err)
	}
	old := created.Execution
	if _, err := f.client.RerunExecution(f.Ctx, old.ID); err == nil {
		t.Fatal("rerun of a pending execution was accepted")
	}
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "solo-rerun", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := f.client.Fail(f.Ctx, old.ID, xs[0].LeaseEpoch, ffd.FailParams{Error: "card declined", Retryable: false}); err != nil {
		t.Fatal(err)
	}
	again, err := f.client.RerunExecution(f.Ctx, old.ID)
	if err != nil {
		t.Fatalf("RerunExecution: %v", err)
	}
	if again.ID == old.ID || again.State != ffd.StatePending || again.RerunOf == nil || *again.RerunOf != old.ID.UUID ||
		again.Kind != "charge" || string(again.Payload) != `{"amount":5}` || again.IdempotencyKey != "" {
		t.Fatalf("rerun %+v; want a new pending charge with the same payload, no key, linked to %s", again, old.ID)
	}
	if again.ID.Partition != old.ID.Partition || ident.Partition(again.ID.UUID) != old.ID.Partition {
		t.Fatalf("rerun %s of %s: want the original's partition, for its id and its uuid", again.ID, old.ID)
	}
	if kp := ident.KeyPartition("default", "charge-7"); old.ID.Partition != kp {
		t.Fatalf("keyed execution on partition %d, want its key's %d", old.ID.Partition, kp)
	}
	var ce *ffd.ConflictError
	if _, err := f.client.RerunExecution(f.Ctx, old.ID); !errors.As(err, &ce) {
		t.Fatalf("second rerun: %v; want a ConflictError", err)
	}
	if x, _ := f.client.Get(f.Ctx, old.ID); x.State != ffd.StateFailed {
		t.Fatalf("the original is %s after its rerun, want failed", x.State)
	}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "member-rerun"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Cancel(f.Ctx, sub.Executions["a"].ID, "test", "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.RerunExecution(f.Ctx, sub.Executions["a"].ID); !errors.As(err, &ce) {
		t.Fatalf("rerun of a flow member: %v; want a ConflictError (rerun the flow)", err)
	}
}
