package flows_test

import (
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
)

// A payload accepted under a client's larger limit is rerun under a
// smaller one (the console's leases.Limits{}: 1 MiB): a rerun re-creates
// what was stored, it does not judge it again. Solo executions and flows.
func TestRerunKeepsWhatWasAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	big := make([]byte, leases.DefaultMaxPayloadBytes+1000)
	lim := leases.Limits{MaxPayloadBytes: 2 * leases.DefaultMaxPayloadBytes}
	fail := func(lane string) {
		t.Helper()
		got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatalf("claim from %s: %v, %d claimed", lane, err, len(got))
		}
		if _, err := leases.Fail(f.Ctx, f.Pool, got[0].ID, got[0].LeaseEpoch, ffdtype.FailParams{Error: "down"}); err != nil {
			t.Fatal(err)
		}
	}

	x, _, err := leases.Create(f.Ctx, f.Pool, lim, ffdtype.CreateParams{Lane: "big-solo", Payload: big})
	if err != nil {
		t.Fatal(err)
	}
	fail("big-solo")
	again, err := leases.Rerun(f.Ctx, f.Pool, leases.Limits{}, x.ID)
	if err != nil || len(again.Payload) != len(big) {
		t.Fatalf("rerun under the default limit: %v; want the execution created with its %d-byte payload", err, len(big))
	}

	sub, err := flows.Submit(f.Ctx, f.Pool, lim, ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "big-flow", Payload: big}}}})
	if err != nil {
		t.Fatal(err)
	}
	fail("big-flow")
	if fl, err := flows.Get(f.Ctx, f.Pool, sub.Flow.ID); err != nil || fl.State != ffdtype.FlowFailed {
		t.Fatalf("the flow after its one member failed: %+v, %v; want failed", fl, err)
	}
	if _, err := flows.RerunFlow(f.Ctx, f.Pool, leases.Limits{}, sub.Flow.ID); err != nil {
		t.Fatalf("rerun the flow under the default limit: %v", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'big-flow' AND length(payload) = $1`, len(big)); n != 2 {
		t.Fatalf("%d members carry the payload, want 2 (the first run's and the rerun's)", n)
	}
}
