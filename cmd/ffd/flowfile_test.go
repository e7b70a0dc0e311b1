package main

import (
	"strings"
	"testing"
	"time"
)

// A flow file takes durations as Go duration strings or nanoseconds,
// payloads as any JSON value, and says where it is wrong.
func TestDecodeFlowFile(t *testing.T) {
	t.Parallel()
	fp, err := decodeFlowFile("f.json", []byte(`{
  "Nodes": [
    {"Ref": "a", "Params": {"Lane": "etl", "Delay": "5s", "LeaseTTL": 2000000000, "Payload": {"table": "users"},
      "Retry": {"Base": "250ms", "Max": "1m"}}},
    {"Ref": "b", "Params": {"Lane": "etl", "Payload": "eyJ4IjoxfQ=="}}
  ],
  "Edges": [{"From": "a", "To": "b"}]
}`))
	if err != nil {
		t.Fatal(err)
	}
	a, b := fp.Nodes[0].Params, fp.Nodes[1].Params
	if a.Delay != 5*time.Second || a.LeaseTTL != 2*time.Second || a.Retry.Base != 250*time.Millisecond || a.Retry.Max != time.Minute {
		t.Errorf("durations: delay %s, lease %s, retry %s..%s; want 5s, 2s, 250ms..1m", a.Delay, a.LeaseTTL, a.Retry.Base, a.Retry.Max)
	}
	if string(a.Payload) != `{"table":"users"}` || string(b.Payload) != `{"x":1}` {
		t.Errorf("payloads %s and %s; want the object as written, and the base64 string decoded", a.Payload, b.Payload)
	}
	for _, tc := range []struct {
		name, file, want string
	}{
		{"a syntax error", "{\n  \"Nodes\": [\n    {\"Ref\": \"b\" \"Params\": {}}\n  ]\n}", "line 3, column 17"},
		{"cut short", `{"Nodes": [`, "cut short"},
		{"a duration that is none", `{"Nodes": [{"Ref": "a", "Params": {"Lane": "x", "Delay": "soon"}}]}`, `Nodes[0].Params.Delay: "soon" is not a duration`},
		{"an unknown key", `{"Nodes": [], "Edgez": []}`, `unknown field "Edgez"`},
		{"a wrong type", `{"Nodes": [{"Ref": 7}]}`, "Nodes.Ref: want string, found a JSON number"},
		{"two values", `{} {}`, "more than one JSON value"},
	} {
		_, err := decodeFlowFile("f.json", []byte(tc.file))
		if err == nil || !strings.Contains(err.Error(), tc.want) || codeOf(err) != exitBadArgs {
			t.Errorf("%s: %v (exit %d); want %q, exit %d", tc.name, err, codeOf(err), tc.want, exitBadArgs)
		}
	}
}
