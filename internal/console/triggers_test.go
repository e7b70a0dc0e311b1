package console_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/console"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/testdb"
	"github.com/flowfabric/ffd/internal/trigger"
)

// The triggers page lists each trigger with its filter and what it
// started, and the events still waiting for a daemon, oldest first.
func TestConsoleTriggers(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, 2*time.Minute)
	base := serve(t, f, console.Auth{})
	if code, body := get(t, base+"/triggers"); code != 200 || !strings.Contains(body, "No triggers yet") || !strings.Contains(body, `<p id="waiting">0 published`) {
		t.Fatalf("/triggers with none: %d\n%s", code, body)
	}
	if _, err := trigger.Create(f.Ctx, f.Pool, leases.Limits{}, trigger.Params{Name: "vip-audit", Event: "order.placed",
		Filter: map[string]any{"vip": true}, Execution: &ffdtype.CreateParams{Lane: "audit"}}); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"o-1", "o-2"} {
		if _, _, err := trigger.Publish(f.Ctx, f.Pool, leases.Limits{}, trigger.Publication{Name: "order.placed", Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	code, body := get(t, base+"/triggers")
	if code != 200 || !strings.Contains(body, `<tr data-trigger="vip-audit"><td>vip-audit</td><td>default</td><td>order.placed</td><td><code>{&#34;vip&#34;:true}</code></td><td>execution</td>`) ||
		!strings.Contains(body, `<p id="waiting">2 published`) || strings.Index(body, "o-1") > strings.Index(body, "o-2") {
		t.Fatalf("/triggers: %d; want vip-audit with its filter, and the two events waiting, oldest first:\n%s", code, body)
	}
}
