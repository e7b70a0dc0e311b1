package ffd_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every node of docs/flows.md's Go snippets names its Kind: those docs
// recommend a worker built with ffd.NewKinds, which fails a node without
// one (ErrUnknownKind), so a snippet without it would not run as shown.
func TestFlowDocsNodesNameTheirKind(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("docs/flows.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d Go snippets in docs/flows.md", len(blocks))
	}
	nodes := 0
	for _, blk := range blocks {
		for _, p := range regexp.MustCompile(`ffd\.CreateParams\{[^}]*\}`).FindAllString(blk[1], -1) {
			nodes++
			if !strings.Contains(p, "Kind:") {
				t.Errorf("docs/flows.md: a node without a Kind: %s", p)
			}
		}
	}
	if nodes < 8 {
		t.Fatalf("found %d nodes in docs/flows.md's snippets; the check reads nothing?", nodes)
	}
}

// docs/workflows.md's Go snippets are the examples of
// example_workflow_test.go, between their `// --8<-- name` marks, so the
// page shows only code that `go test` runs.
func TestWorkflowDocsAreTheExamples(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("docs/workflows.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_workflow_test.go")
	if err != nil {
		t.Fatal(err)
	}
	snippets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?s)// --8<-- \S+\n(.*?)\n\s*// --8<--\n`).FindAllSubmatch(src, -1) {
		snippets[dedent(string(m[1]))] = true
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)\n```").FindAllSubmatch(doc, -1)
	if len(blocks) != len(snippets) || len(blocks) < 5 {
		t.Fatalf("docs/workflows.md has %d Go snippets, the examples %d marked ones; want the same, at least 5", len(blocks), len(snippets))
	}
	for _, b := range blocks {
		if !snippets[string(b[1])] {
			t.Errorf("docs/workflows.md shows code no example runs:\n%s", b[1])
		}
	}
}

// dedent removes the indentation every line of s shares.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	common := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		n := len(l) - len(strings.TrimLeft(l, "\t"))
		if common < 0 || n < common {
			common = n
		}
	}
	for i, l := range lines {
		if len(l) >= common && common > 0 {
			lines[i] = l[common:]
		}
	}
	return strings.Join(lines, "\n")
}
