package ffd

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flowfabric/ffd/internal/fault"
)

// The JSON Schema of docs/worker-protocol.md names exactly the fields
// the protocol's messages have.
func TestWorkerProtocolSchemaIsTheMessages(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/worker-protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## JSON Schema\n\n```json\n")
	block, _, ok2 := strings.Cut(rest, "\n```")
	if !ok || !ok2 {
		t.Fatal("docs/worker-protocol.md has no JSON Schema block")
	}
	var schema struct {
		Defs map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal([]byte(block), &schema); err != nil {
		t.Fatalf("the schema does not parse: %v", err)
	}
	for def, v := range map[string]any{
		"claimRequest": apiClaim{}, "claimAnswer": apiJobs{}, "job": apiJob{}, "renewRequest": apiFence{},
		"renewAnswer": apiRenewed{}, "completeRequest": apiComplete{}, "failRequest": apiFail{}, "endingAnswer": apiEnding{},
		"watchRequest": apiWatch{}, "watchAnswer": apiWatched{},
	} {
		var want []string
		rt := reflect.TypeOf(v)
		for i := range rt.NumField() {
			want = append(want, strings.Split(rt.Field(i).Tag.Get("json"), ",")[0])
		}
		var got []string
		for k := range schema.Defs[def].Properties {
			got = append(got, k)
		}
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("schema %s names %v; the message has %v", def, got, want)
		}
	}
	var errFields struct {
		Properties map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
		} `json:"properties"`
	}
	raw, _ := json.Marshal(schema.Defs["errorAnswer"])
	_ = json.Unmarshal(raw, &errFields)
	rt := reflect.TypeOf(fault.Wire{})
	for i := range rt.NumField() {
		name := strings.Split(rt.Field(i).Tag.Get("json"), ",")[0]
		if _, ok := errFields.Properties["error"].Properties[name]; !ok {
			t.Errorf("schema errorAnswer lacks the error's field %s", name)
		}
	}
}
