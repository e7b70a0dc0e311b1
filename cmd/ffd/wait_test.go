package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

// `ffd exec wait` and `ffd flow wait` print the outcome and exit with a
// code that names it.
func TestWaitCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client := quietClient(t, db)
	claim := func(lane string) *ffd.Execution {
		t.Helper()
		xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "cli-test"})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim from %s: %d, %v", lane, len(xs), err)
		}
		return xs[0]
	}
	tests := []struct {
		name string
		end  func(x *ffd.Execution) error
		code int
		want string
	}{
		{"completed", func(x *ffd.Execution) error {
			_, err := client.Complete(ctx, x.ID, x.LeaseEpoch, []byte(`{"total":42}`))
			return err
		}, exitOK, `"total": 42`},
		{"failed", func(x *ffd.Execution) error {
			_, err := client.Fail(ctx, x.ID, x.LeaseEpoch, ffd.FailParams{Error: "upstream said no"})
			return err
		}, exitOutcomeFailed, "upstream said no"},
		{"cancelled", func(x *ffd.Execution) error {
			_, err := client.Cancel(ctx, x.ID, "operator", "test")
			return err
		}, exitOutcomeCancelled, `"state": "cancelled"`},
	}
	for _, tc := range tests {
		// As a flow's only step, so that the flow ends with it.
		sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
			Nodes: []ffd.SubmitNode{{Ref: "only", Params: ffd.CreateParams{Lane: "cli-" + tc.name, MaxAttempts: 1}}},
		})
		if err != nil {
			t.Fatal(err)
		}
		id := sub.Executions["only"].ID.String()
		type ran struct {
			code     int
			out, err string
		}
		done := make(chan ran, 1)
		go func() {
			code, out, errOut := runFFD(t, "exec", "wait", id, "--json", url)
			done <- ran{code, out, errOut}
		}()
		time.Sleep(100 * time.Millisecond) // the wait is under way before the end
		if err := tc.end(claim("cli-" + tc.name)); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.code != tc.code || !strings.Contains(r.out, tc.want) {
			t.Fatalf("exec wait (%s): exit %d, stdout %q, stderr %q; want exit %d and %q", tc.name, r.code, r.out, r.err, tc.code, tc.want)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(r.out), &m); err != nil || m["state"] != tc.name {
			t.Fatalf("exec wait --json (%s): %q (%v); want state %s", tc.name, r.out, err, tc.name)
		}
		code, out, errOut := runFFD(t, "flow", "wait", sub.Flow.ID.String(), url)
		// A flow fails when a member failed or expired; a cancelled
		// member does not fail it.
		flowState := map[string]string{"completed": "completed", "failed": "failed", "cancelled": "completed"}[tc.name]
		wantCode := map[string]int{"completed": exitOK, "failed": exitOutcomeFailed}[flowState]
		if code != wantCode || !strings.Contains(out, "flow "+sub.Flow.ID.String()+" "+flowState) || !strings.Contains(out, "only") {
			t.Fatalf("flow wait (%s): exit %d, stdout %q, stderr %q; want exit %d and a %s flow", tc.name, code, out, errOut, wantCode, flowState)
		}
	}
	x, err := client.Create(ctx, ffd.CreateParams{Lane: "cli-never"})
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runFFD(t, "exec", "wait", x.Execution.ID.String(), "--timeout", "200ms", url)
	if code != exitWaitTimedOut || !strings.Contains(errOut, "--timeout") {
		t.Fatalf("exec wait --timeout: exit %d, stderr %q; want exit %d", code, errOut, exitWaitTimedOut)
	}
	code, _, errOut = runFFD(t, "flow", "wait", "not-a-uuid", url)
	if code != exitBadArgs {
		t.Fatalf("flow wait of a bad id: exit %d, stderr %q; want %d", code, errOut, exitBadArgs)
	}
}

// `ffd flow signal` and `ffd exec signal` end a wait, keep a signal no
// step waits for yet, and are refused by a finished flow; `exec show`
// shows the wait.
func TestSignalCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client := quietClient(t, db)
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "gate", Params: ffd.CreateParams{Lane: "cli-signal"}}}})
	if err != nil {
		t.Fatal(err)
	}
	xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: "cli-signal", Worker: "cli-test"})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %d, %v", len(xs), err)
	}
	x := xs[0]
	if _, err := client.Suspend(ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "approved", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runFFD(t, "exec", "show", x.ID.String(), url)
	if code != 0 || !strings.Contains(out, "waits for signal approved until") {
		t.Fatalf("exec show of a waiting step: exit %d, %q, %q; want its wait", code, out, errOut)
	}
	code, out, errOut = runFFD(t, "flow", "signal", sub.Flow.ID.String(), "approved", "--payload", `{"by":"ops"}`, url)
	if code != 0 || !strings.Contains(out, "woke "+x.ID.String()) {
		t.Fatalf("flow signal: exit %d, %q, %q; want it to wake %s", code, out, errOut, x.ID)
	}
	code, out, errOut = runFFD(t, "exec", "signal", x.ID.String(), "later", "--json", url)
	if code != 0 || !strings.Contains(out, `"woke": null`) {
		t.Fatalf("exec signal with no wait for it: exit %d, %q, %q; want it kept", code, out, errOut)
	}
	code, out, _ = runFFD(t, "exec", "show", x.ID.String(), url)
	if code != 0 || !strings.Contains(out, "woken by signal approved") {
		t.Fatalf("exec show after the signal: exit %d, %q; want what woke it", code, out)
	}
	if _, err := client.Cancel(ctx, x.ID, "done", "test"); err != nil {
		t.Fatal(err)
	}
	code, _, errOut = runFFD(t, "flow", "signal", sub.Flow.ID.String(), "approved", url)
	if code != exitFailed || !strings.Contains(errOut, "already") {
		t.Fatalf("flow signal to a finished flow: exit %d, %q; want exit 1, refused", code, errOut)
	}
}
