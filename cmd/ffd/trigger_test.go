package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/flowfabric/ffd/internal/testdb"
)

// ffd trigger creates, lists and deletes triggers, publishes events
// (once per key) and shows them; bad input exits 2.
func TestTriggerCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	code, out, errOut := runFFD(t, "trigger", "create", "vip-audit", "--event", "order.placed", "--filter", `{"vip": true}`, "--lane", "audit", url)
	if code != 0 || !strings.Contains(out, "trigger vip-audit created: each order.placed event starts execution") {
		t.Fatalf("trigger create: %d %q %q", code, out, errOut)
	}
	code, out, _ = runFFD(t, "trigger", "list", url)
	if code != 0 || !regexp.MustCompile(`vip-audit\s+default\s+order.placed\s+\{"vip":true\}\s+execution\s+false\s+0`).MatchString(out) {
		t.Fatalf("trigger list: %d %q", code, out)
	}
	code, out, errOut = runFFD(t, "trigger", "publish", "order.placed", "--key", "o-1", "--payload", `{"vip": true}`, "--json", url)
	var first map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &first) != nil || first["existed"] != false {
		t.Fatalf("trigger publish: %d %q %q", code, out, errOut)
	}
	code, out, _ = runFFD(t, "trigger", "publish", "order.placed", "--key", "o-1", url)
	if code != 0 || !strings.Contains(out, "published before under this key") || !strings.Contains(out, first["event_id"].(string)) {
		t.Fatalf("trigger publish again: %d %q; want the first event, nothing new", code, out)
	}
	code, out, _ = runFFD(t, "trigger", "event", first["event_id"].(string), url)
	if code != 0 || !strings.Contains(out, "fired -") {
		t.Fatalf("trigger event: %d %q; want it not fired (no daemon runs)", code, out)
	}
	for _, bad := range [][]string{
		{"trigger", "create", "x", "--event", "e", "--filter", "[1]", "--lane", "l"},
		{"trigger", "create", "x", "--event", "e"},
		{"trigger", "publish", "e", "--payload", "{nope"},
		{"trigger", "create", "x", "--event", "e", "--lane", "bad lane"},
	} {
		if code, _, _ := runFFD(t, append(bad, url)...); code != 2 {
			t.Errorf("ffd %s: exit %d, want 2", strings.Join(bad, " "), code)
		}
	}
	if code, out, _ := runFFD(t, "trigger", "delete", "vip-audit", url); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("trigger delete: %d %q", code, out)
	}
	if code, _, _ := runFFD(t, "trigger", "delete", "vip-audit", url); code != 1 {
		t.Fatalf("deleting a deleted trigger: exit %d, want 1", code)
	}
}
