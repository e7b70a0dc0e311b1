package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/flowfabric/ffd/internal/testdb"
)

// ffd flow submit takes a flow file with a sub-flow, a compensation, an
// on-failure step and a version; ffd versions announces and lists
// versions; flow show prints the links. Bad input exits 2, an unknown
// version 2 (a validation error), writing nothing.
func TestSubmitAndVersionsCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	file := filepath.Join(t.TempDir(), "order.json")
	flow := `{"Flow": {"Kind": "order", "Version": "v2", "OnFailure": {"Lane": "ops", "Kind": "page"}},
		"Nodes": [
			{"Ref": "charge", "Params": {"Lane": "pay"}, "Compensate": {"Lane": "pay", "Kind": "refund"}},
			{"Ref": "ship", "Flow": {"Nodes": [{"Ref": "pick", "Params": {"Lane": "warehouse"}}]}}
		],
		"Edges": [{"From": "charge", "To": "ship"}]}`
	if err := os.WriteFile(file, []byte(flow), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFFD(t, "flow", "submit", "--flow-file", file, url); code != 2 || !strings.Contains(errOut+out, "unknown_version") && !strings.Contains(errOut+out, "announce") {
		t.Fatalf("submit under an unannounced version: %d %q %q; want exit 2 naming the version", code, out, errOut)
	}
	if code, out, errOut := runFFD(t, "versions", "add", "v2", url); code != 0 || !strings.Contains(out, "announced 1 versions") {
		t.Fatalf("versions add: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runFFD(t, "flow", "submit", "--flow-file", file, "--json", url)
	var sub map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &sub) != nil {
		t.Fatalf("flow submit: %d %q %q", code, out, errOut)
	}
	if sub["version"] != "v2" || sub["compensation"] != "armed" {
		t.Fatalf("the submitted flow: version %v, compensation %v; want v2, armed", sub["version"], sub["compensation"])
	}
	steps := sub["steps"].(map[string]any)
	if lane := steps["ship"].(map[string]any)["lane"]; lane != "ffd.subflow" {
		t.Fatalf("the sub-flow step's lane is %v; want ffd.subflow", lane)
	}
	code, out, _ = runFFD(t, "flow", "show", sub["flow_id"].(string), url)
	if code != 0 || !strings.Contains(out, "version v2") || !strings.Contains(out, "compensation armed") {
		t.Fatalf("flow show: %d %q; want its version and compensation", code, out)
	}
	code, out, _ = runFFD(t, "exec", "show", steps["charge"].(map[string]any)["execution_id"].(string), url)
	if code != 0 || !regexp.MustCompile(`version\s+v2`).MatchString(out) {
		t.Fatalf("exec show: %d %q; want the step's version", code, out)
	}
	code, out, _ = runFFD(t, "versions", "list", url)
	if code != 0 || !regexp.MustCompile(`default\s+v2\s+\S+\s+\S+\s+1\s+1`).MatchString(out) {
		t.Fatalf("versions list: %d %q; want v2 with 1 pending execution and 1 open flow", code, out)
	}
	for _, bad := range [][]string{
		{"versions", "add", "v 2"},
		{"flow", "submit", "--flow-file", file + ".missing"},
	} {
		if code, _, _ := runFFD(t, append(bad, url)...); code != 2 {
			t.Errorf("ffd %s: exit %d, want 2", strings.Join(bad, " "), code)
		}
	}
}
