package daemon_test

import (
	"os"
	"regexp"
	"testing"

	"github.com/flowfabric/ffd/internal/daemon"
)

// A fresh daemon exposes every metric docs/operations.md documents
// (the gauges labelled by the application's lanes, consumers and slots
// aside: they appear with the first sample), each
// labelled one with every label value it can take, so dashboards and
// alerts have series before the first event.
func TestFreshDaemonExposesEveryDocumentedMetric(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := regexp.MustCompile(`(?s)\n## Metrics\n(.*?)\n###? `).FindSubmatch(doc)
	if section == nil {
		t.Fatal("docs/operations.md has no Metrics section")
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ffd_[a-z_]+)").FindAllStringSubmatch(string(section[1]), -1) {
		documented[m[1]] = true
	}
	if len(documented) < 15 {
		t.Fatalf("found %d metrics in docs/operations.md; the table moved?", len(documented))
	}
	families, err := daemon.NewMetrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]int{}
	for _, f := range families {
		exposed[f.GetName()] = len(f.GetMetric())
	}
	for name := range documented {
		switch name {
		case "ffd_executions", "ffd_lane_due_executions", "ffd_lane_lag_seconds",
			"ffd_outbox_consumer_behind_events", "ffd_outbox_consumer_lag_seconds", "ffd_wal_slot_retained_bytes":
			continue // labelled by the application's lanes, consumers and slots
		}
		if exposed[name] == 0 {
			t.Errorf("%s is documented but a fresh daemon does not expose it", name)
		}
	}
	for name, want := range map[string]int{
		"ffd_dispatch_takes_total": 2, "ffd_edges_resolved_total": 3, "ffd_group_decisions_total": 2,
		"ffd_leases_expired_total": 4, "ffd_lease_timers_total": 1, "ffd_sweep_found_total": 5,
		"ffd_dropped_hints_total": 1, "ffd_outbox_deleted_total": 2, "ffd_retention_deleted_total": 3,
	} {
		if exposed[name] != want {
			t.Errorf("%s: %d series at start, want %d (one per label value)", name, exposed[name], want)
		}
	}
}
