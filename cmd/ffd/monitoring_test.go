package main

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
)

// documentedMetrics reads every metric name in docs/operations.md's
// metric tables (daemon and workers).
func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(ffd_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

var metricRef = regexp.MustCompile(`\bffd_[a-z_]+`)

// undocumented lists the metrics expr reads that docs/operations.md does
// not document (a histogram's _bucket, _count and _sum are its own).
func undocumented(expr string, documented map[string]bool) []string {
	var out []string
	for _, name := range metricRef.FindAllString(expr, -1) {
		base := name
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			if b, ok := strings.CutSuffix(name, suffix); ok && documented[b] {
				base = b
			}
		}
		if !documented[base] {
			out = append(out, name)
		}
	}
	return out
}

type grafanaPanel struct {
	Type, Title string
	GridPos     struct{ H, W, X, Y int }
	Datasource  *struct{ UID string }
	Targets     []struct {
		Expr       string
		Datasource *struct{ UID string }
	}
}

// The Grafana dashboard in deploy/grafana: every panel reads the
// dashboard's data source, has a query, and reads only documented
// metrics; panels do not overlap; it covers what operators watch. Its
// queries, made concrete, go to $FFD_PROMQL_OUT as recording rules for
// `promtool check rules` (.ci/run), which parses them.
func TestGrafanaDashboard(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/grafana/ffd-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID, Title string
		Panels     []grafanaPanel
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("ffd-dashboard.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Fatal("the dashboard has no uid or title")
	}
	documented := documentedMetrics(t)
	var exprs []string
	titles := ""
	for i, p := range dash.Panels {
		titles += p.Title + "\n"
		for _, q := range dash.Panels[:i] {
			a, b := p.GridPos, q.GridPos
			if a.X < b.X+b.W && b.X < a.X+a.W && a.Y < b.Y+b.H && b.Y < a.Y+a.H {
				t.Errorf("panels %q and %q overlap", p.Title, q.Title)
			}
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: want the ${datasource} data source and a query", p.Title)
		}
		for _, q := range p.Targets {
			if q.Datasource == nil || q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query not on ${datasource}", p.Title)
			}
			if bad := undocumented(q.Expr, documented); len(bad) > 0 {
				t.Errorf("panel %q reads undocumented metrics %v", p.Title, bad)
			}
			exprs = append(exprs, q.Expr)
		}
	}
	for _, want := range []string{"Dispatch delay", "Dispatch lag", "by lane and outcome", "Lease expiries", "Consumer lag", "Daemons ready"} {
		if !strings.Contains(titles, want) {
			t.Errorf("the dashboard has no panel about %q", want)
		}
	}
	if out := os.Getenv("FFD_PROMQL_OUT"); out != "" {
		concrete := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$lane", ".*")
		var rules strings.Builder
		rules.WriteString("groups:\n  - name: ffd-dashboard\n    rules:\n")
		for i, e := range exprs {
			q, _ := json.Marshal(concrete.Replace(e))
			fmt.Fprintf(&rules, "      - record: ffd_dashboard:q%d\n        expr: %s\n", i, q)
		}
		if err := os.WriteFile(out, []byte(rules.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The alert rules in deploy/prometheus read only documented metrics
// (promtool checks their syntax and tests them in .ci/run).
func TestAlertRulesReadDocumentedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/prometheus/ffd-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	documented := documentedMetrics(t)
	n := 0
	for _, m := range regexp.MustCompile(`(?m)^\s+expr: (.*)$`).FindAllStringSubmatch(string(b), -1) {
		n++
		if bad := undocumented(m[1], documented); len(bad) > 0 {
			t.Errorf("alert expression %q reads undocumented metrics %v", m[1], bad)
		}
	}
	if n < 10 {
		t.Fatalf("found %d alert expressions; want the rules file's", n)
	}
}
