package ffd_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

type quote struct {
	Vendor string `json:"vendor"`
	Amount int    `json:"amount"`
}

type total struct {
	Sum  int      `json:"sum"`
	From []string `json:"from"`
}

// Typed handlers by kind: payloads decode into the handler's type,
// results encode back; a join step reads its parents' results by step
// name in one call; an unknown kind and an undecodable payload fail at
// once, without retries.
func TestTypedHandlersAndUpstreamResults(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "quote", func(_ context.Context, _ *ffd.Job, q quote) (quote, error) {
		q.Amount *= 10 // cents
		return q, nil
	})
	ffd.Handle(kinds, "sum", func(ctx context.Context, job *ffd.Job, _ struct{}) (total, error) {
		quotes, err := ffd.UpstreamResults[quote](ctx, job)
		if err != nil {
			return total{}, err
		}
		var out total
		for step, q := range quotes {
			out.Sum += q.Amount
			out.From = append(out.From, step)
		}
		sort.Strings(out.From)
		return out, nil
	})
	soloErr := make(chan error, 1)
	ffd.Handle(kinds, "solo", func(ctx context.Context, job *ffd.Job, _ struct{}) (struct{}, error) {
		_, err := job.Upstreams(ctx)
		soloErr <- err
		return struct{}{}, nil
	})
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"typed"}, Kinds: kinds, PollInterval: 50 * time.Millisecond})

	node := func(ref, kind string, payload any) ffd.SubmitNode {
		return ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: "typed", Kind: kind, JSON: payload}}
	}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{node("vendor-a", "quote", quote{"a", 3}), node("vendor-b", "quote", quote{"b", 5}), node("total", "sum", nil)},
		Edges: []ffd.SubmitEdge{{From: "vendor-a", To: "total"}, {From: "vendor-b", To: "total"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "typed", Kind: "mystery", MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	garbled, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "typed", Kind: "quote", Payload: []byte(`{"amount":"lots"}`), MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	solo, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "typed", Kind: "solo"})
	if err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the flow to complete", func() bool { return f.flowState(*sub) == ffd.FlowCompleted })
	x, err := f.client.Get(f.Ctx, sub.Executions["total"].ID)
	if err != nil || string(x.Result) != `{"sum":80,"from":["vendor-a","vendor-b"]}` {
		t.Fatalf("total: %s (%v); want the sum of both quotes in cents, by step", x.Result, err)
	}
	for _, c := range []struct {
		id   ffd.ExecutionID
		want string
	}{{unknown.Execution.ID, "no handler for this kind"}, {garbled.Execution.ID, "decode the payload"}} {
		f.WaitFor("a permanent failure", func() bool {
			x, err := f.client.Get(f.Ctx, c.id)
			return err == nil && x.State == ffd.StateFailed
		})
		x, _ := f.client.Get(f.Ctx, c.id)
		if x.Attempt != 1 || !strings.Contains(x.LastError, c.want) {
			t.Errorf("%s: attempt %d, error %q; want one attempt failing with %q", c.id, x.Attempt, x.LastError, c.want)
		}
	}
	f.WaitFor("the solo job", func() bool {
		x, err := f.client.Get(f.Ctx, solo.Execution.ID)
		return err == nil && x.State == ffd.StateCompleted
	})
	if err := f.await("the solo job's upstream read", soloErr); !errors.Is(err, ffd.ErrNotAFlowMember) {
		t.Fatalf("Upstreams of a solo job: %v; want ErrNotAFlowMember", err)
	}
}

// A worker refuses kinds registered twice, both Handler and Kinds, and
// an empty Kinds.
func TestKindsAreValidated(t *testing.T) {
	t.Parallel()
	f := setup(t)
	noop := func(context.Context, *ffd.Job, struct{}) (struct{}, error) { return struct{}{}, nil }
	twice := ffd.NewKinds()
	ffd.Handle(twice, "a", noop)
	ffd.Handle(twice, "a", noop)
	one := ffd.NewKinds()
	ffd.Handle(one, "a", noop)
	for name, cfg := range map[string]ffd.WorkerConfig{
		"a kind twice": {Lanes: []string{"k"}, Kinds: twice},
		"both":         {Lanes: []string{"k"}, Kinds: one, Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }},
		"no kinds":     {Lanes: []string{"k"}, Kinds: ffd.NewKinds()},
	} {
		if _, err := ffd.NewWorker(f.client, cfg); err == nil {
			t.Errorf("%s: NewWorker accepted it", name)
		}
	}
}
