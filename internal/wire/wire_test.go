package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
)

// The params a v1 row holds, as the golden files spell them.
var (
	wantExecution = ffdtype.CreateParams{
		Lane: "reports", Kind: "nightly", Payload: []byte(`{"day":1}`), Priority: 5,
		RequiredCapabilities: []string{"gpu"}, MaxAttempts: 4,
		Retry:    ffdtype.RetryPolicy{Base: 2 * time.Second, Max: time.Minute, Multiplier: 3, Jitter: 0.2},
		LeaseTTL: 45 * time.Second, AttemptTimeout: 10 * time.Minute, Deadline: time.Hour, Delay: 1500 * time.Millisecond,
		Tags: map[string]any{"team": "data", "none": nil}, UniqueKey: "nightly", UniqueWindow: 24 * time.Hour,
	}
	wantFlowV2 = ffdtype.SubmitFlowParams{
		Flow: ffdtype.CreateFlowParams{Kind: "order", Version: "v2", OnFailure: &ffdtype.CreateParams{Lane: "ops", Kind: "page"}},
		Nodes: []ffdtype.SubmitNode{
			{Ref: "charge", Params: ffdtype.CreateParams{Lane: "pay", Version: "v2"},
				Compensate: &ffdtype.CreateParams{Lane: "pay", Kind: "refund", MaxAttempts: 5}},
			{Ref: "ship", Params: ffdtype.CreateParams{Kind: "shipping"}, Flow: &ffdtype.SubmitFlowParams{
				Nodes: []ffdtype.SubmitNode{{Ref: "pick", Params: ffdtype.CreateParams{Lane: "warehouse"}}},
			}},
		},
		Edges: []ffdtype.SubmitEdge{{From: "charge", To: "ship"}},
	}
	wantFlow = ffdtype.SubmitFlowParams{
		Flow: ffdtype.CreateFlowParams{Kind: "etl", Tags: map[string]any{"team": "data"}},
		Nodes: []ffdtype.SubmitNode{
			{Ref: "extract", Params: ffdtype.CreateParams{Lane: "io"}},
			{Ref: "load", Params: ffdtype.CreateParams{Lane: "db", MaxAttempts: 2},
				Policy: &ffdtype.Policy{Kind: ffdtype.Quorum, K: 1, OnSatisfied: ffdtype.CancelRemaining}},
		},
		Edges: []ffdtype.SubmitEdge{{From: "extract", To: "load", DataPassingRef: "rows"}},
	}
)

func golden(t *testing.T, name string) json.RawMessage {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A stored row is read by its wire names, not by the Go structs' field
// names: the golden rows decode to the params they stand for, and those
// params encode back to the same JSON. Renaming a field of
// ffdtype.CreateParams or ffdtype.SubmitFlowParams cannot change either side
// without this test (or the compiler, in wire.go) saying so.
func TestStoredParamsAreTheWireFormat(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		file, target string
		want         any
	}{
		{"wire_v1_execution.json", TargetExecution, wantExecution},
		{"wire_v1_flow.json", TargetFlow, wantFlow},
		{"wire_v2_flow.json", TargetFlow, wantFlowV2},
	} {
		t.Run(tt.target, func(t *testing.T) {
			t.Parallel()
			raw := golden(t, tt.file)
			ep, fp, err := Decode(raw, tt.target)
			if err != nil {
				t.Fatal(err)
			}
			var got any
			var back json.RawMessage
			if ep != nil {
				got = *ep
				back, err = EncodeExecution(*ep)
			} else {
				got = *fp
				back, err = EncodeFlow(*fp)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("%s decodes to\n%+v\nwant\n%+v", tt.file, got, tt.want)
			}
			// A version 1 row is written back as version 2, the same
			// otherwise.
			if !sameJSON(t, back, bytes.Replace(raw, []byte(`"v": 1`), []byte(`"v": 2`), 1)) {
				t.Errorf("the params encode to\n%s\nwant the stored\n%s", back, raw)
			}
		})
	}
}

// A version this ffd does not know, a target missing from the params and
// params that are not JSON are errors that say which.
func TestStoredParamsRefusals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		raw, target, want string
	}{
		{`{"v": 3, "execution": {}}`, TargetExecution, "format version 3"},
		{`{"Lane": "old"}`, TargetExecution, "format version 0"},
		{`{"v": 1, "flow": {"nodes": []}}`, TargetExecution, "no execution"},
		{`[1`, TargetFlow, "decode the stored params"},
	} {
		_, _, err := Decode(json.RawMessage(tt.raw), tt.target)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("decode %s as %s: %v; want an error saying %q", tt.raw, tt.target, err, tt.want)
		}
	}
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}
