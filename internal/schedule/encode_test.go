package schedule

import (
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/wire"
)

// A stored flow keeps every JSON payload it was given, as bytes: its
// steps', a compensation's and a sub-flow's steps'.
func TestEncodeTargetKeepsNestedPayloads(t *testing.T) {
	t.Parallel()
	flow := &ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{
			{Ref: "a", Params: ffdtype.CreateParams{Lane: "l", JSON: map[string]int{"a": 1}},
				Compensate: &ffdtype.CreateParams{Lane: "l", JSON: map[string]int{"c": 1}}},
			{Ref: "b", Flow: &ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "x", Params: ffdtype.CreateParams{Lane: "l", JSON: map[string]int{"x": 1}}}}}},
		},
	}
	_, raw, err := EncodeTarget(leases.Limits{}, "default", nil, flow, "a schedule", "tick")
	if err != nil {
		t.Fatal(err)
	}
	_, back, err := wire.Decode(raw, wire.TargetFlow)
	if err != nil {
		t.Fatal(err)
	}
	for what, got := range map[string][]byte{
		`{"a":1}`: back.Nodes[0].Params.Payload,
		`{"c":1}`: back.Nodes[0].Compensate.Payload,
		`{"x":1}`: back.Nodes[1].Flow.Nodes[0].Params.Payload,
	} {
		if string(got) != what {
			t.Errorf("stored payload %q; want %s", got, what)
		}
	}
	if flow.Nodes[1].Flow.Nodes[0].Params.Payload != nil {
		t.Error("encoding changed the caller's params")
	}
}
