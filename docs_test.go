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
