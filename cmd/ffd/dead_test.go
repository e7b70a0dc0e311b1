package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

// ffd dead list shows dead letters with their last error; ffd dead rerun
// selects by filter or id, shows a dry run, reruns, and refuses what is
// not a dead letter or no selection at all.
func TestDeadCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client := quietClient(t, db)
	fail := func(lane, msg string) {
		if _, err := client.Create(ctx, ffd.CreateParams{Lane: lane, Kind: "charge", MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
		xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim %s: %v %v", lane, xs, err)
		}
		if _, err := client.Fail(ctx, xs[0].ID, xs[0].LeaseEpoch, ffd.FailParams{Error: msg}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		fail("dl-a", "card declined\nby the bank")
	}
	fail("dl-b", "gateway timeout")
	running, _ := client.Create(ctx, ffd.CreateParams{Lane: "dl-run"})
	if _, err := client.Claim(ctx, ffd.ClaimParams{Lane: "dl-run", Worker: "w/1", Max: 1}); err != nil {
		t.Fatal(err)
	}

	code, out, errOut := runFFD(t, "dead", "list", "--lane", "dl-a", url)
	if code != 0 || strings.Count(out, "card declined by the bank") != 3 || strings.Contains(out, "timeout") {
		t.Fatalf("dead list --lane dl-a: %d %q %q; want the 3 dead letters of dl-a with their errors on one line", code, out, errOut)
	}
	code, out, _ = runFFD(t, "dead", "list", "--error", "TIMEOUT", "--json", url)
	var list struct {
		DeadLetters []map[string]any `json:"dead_letters"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.DeadLetters) != 1 || list.DeadLetters[0]["lane"] != "dl-b" {
		t.Fatalf("dead list --error TIMEOUT --json: %d %q; want dl-b's one", code, out)
	}
	code, _, errOut = runFFD(t, "dead", "rerun", url)
	if code != 2 || !strings.Contains(errOut, "ask for all") {
		t.Fatalf("dead rerun with no selection: %d %q; want exit 2 and a refusal", code, errOut)
	}
	code, out, _ = runFFD(t, "dead", "rerun", "--lane", "dl-a", "--dry-run", url)
	if code != 0 || !strings.Contains(out, "dry run: 3 dead letters would be rerun") {
		t.Fatalf("dead rerun --dry-run: %d %q", code, out)
	}
	code, _, errOut = runFFD(t, "dead", "rerun", running.Execution.ID.String(), url)
	if code == 0 || !strings.Contains(errOut, "still running") {
		t.Fatalf("dead rerun of a running execution: %d %q; want a refusal", code, errOut)
	}
	code, out, errOut = runFFD(t, "dead", "rerun", "--lane", "dl-a", "--json", url)
	var rerun struct {
		Reruns []map[string]any `json:"reruns"`
		More   bool             `json:"more"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &rerun) != nil || len(rerun.Reruns) != 3 || rerun.More {
		t.Fatalf("dead rerun --lane dl-a --json: %d %q %q; want 3 reruns", code, out, errOut)
	}
	page, err := client.ListDeadLetters(ctx, ffd.ListDeadParams{})
	if err != nil || len(page.Executions) != 1 || page.Executions[0].Lane != "dl-b" {
		t.Fatalf("dead letters left: %v, %v; want only dl-b's", page, err)
	}
	code, out, _ = runFFD(t, "dead", "rerun", "--all", "--limit", "1", url)
	if code != 0 || !strings.Contains(out, "1 of 1 selected dead letters rerun") {
		t.Fatalf("dead rerun --all --limit 1: %d %q", code, out)
	}
}
