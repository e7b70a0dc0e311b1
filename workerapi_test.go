package ffd_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/flowfabric/ffd"
)

const apiToken = "test-token-0123456789"

// apiCall posts body to the worker API's op and decodes the answer.
func apiCall(t *testing.T, srv *httptest.Server, token, op string, body any) (int, map[string]any) {
	t.Helper()
	var b []byte
	switch v := body.(type) {
	case string:
		b = []byte(v)
	default:
		var err error
		if b, err = json.Marshal(body); err != nil {
			t.Fatal(err)
		}
	}
	req, err := http.NewRequest(http.MethodPost, srv.URL+ffd.WorkerAPIPrefix+op, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("%s: answer %d is not JSON: %q", op, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

func newAPI(t *testing.T, f *fixture) *httptest.Server {
	t.Helper()
	api, err := ffd.NewWorkerAPI(f.client, ffd.WorkerAPIConfig{Tokens: []string{apiToken}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		if err := api.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

// The worker protocol runs a flow member through a retry to completion,
// handing it its upstream's result, fenced on each attempt's epoch.
func TestWorkerAPIRunsAFlowStep(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newAPI(t, f)
	f.startDaemon()
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "a", Params: ffd.CreateParams{Lane: "api.a", JSON: map[string]int{"n": 1}}},
			{Ref: "b", Params: ffd.CreateParams{Lane: "api.b", Kind: "double"}},
		},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(lane string) (job map[string]any) {
		t.Helper()
		f.WaitFor("a claim of "+lane, func() bool {
			code, out := apiCall(t, srv, apiToken, "claim", map[string]any{"lane": lane, "worker": "py/1", "wait_ms": 1000})
			xs, _ := out["executions"].([]any)
			if code != 200 || len(xs) > 1 {
				t.Fatalf("claim %s: %d %v, want at most one execution", lane, code, out)
			}
			if len(xs) == 1 {
				job = xs[0].(map[string]any)
			}
			return job != nil
		})
		return job
	}
	a := claim("api.a")
	if got := fmt.Sprint(a["payload"]); got != "map[n:1]" {
		t.Fatalf("payload = %s, want the JSON object {n:1}", got)
	}
	code, out := apiCall(t, srv, apiToken, "fail", map[string]any{"id": a["id"], "epoch": a["epoch"], "error": "flaky", "immediate": true})
	if code != 200 || out["state"] != "pending" {
		t.Fatalf("fail: %d %v, want 200 and a retry (pending)", code, out)
	}
	// The old attempt's epoch is fenced out.
	code, out = apiCall(t, srv, apiToken, "complete", map[string]any{"id": a["id"], "epoch": a["epoch"], "result": 1})
	if e := out["error"].(map[string]any); code != 409 || e["code"] != "lease_lost" {
		t.Fatalf("complete at a stale epoch: %d %v, want 409 lease_lost", code, out)
	}
	a = claim("api.a")
	if code, out := apiCall(t, srv, apiToken, "renew", map[string]any{"id": a["id"], "epoch": a["epoch"]}); code != 200 || out["lease_expires_at"] == nil {
		t.Fatalf("renew: %d %v", code, out)
	}
	if code, out := apiCall(t, srv, apiToken, "complete", map[string]any{"id": a["id"], "epoch": a["epoch"], "result": map[string]int{"n": 2}}); code != 200 || out["state"] != "completed" {
		t.Fatalf("complete: %d %v", code, out)
	}
	b := claim("api.b")
	ups, _ := b["upstreams"].(map[string]any)
	if got := fmt.Sprint(ups["a"]); got != "map[n:2]" || b["kind"] != "double" || b["step"] != "b" {
		t.Fatalf("downstream job = %v, want kind double, step b, upstreams {a: {n:2}}", b)
	}
	if code, out := apiCall(t, srv, apiToken, "complete", map[string]any{"id": b["id"], "epoch": b["epoch"], "result": 4}); code != 200 {
		t.Fatalf("complete b: %d %v", code, out)
	}
	x, err := f.client.Get(f.Ctx, sub.Executions["b"].ID)
	if err != nil || x.State != ffd.StateCompleted || string(x.Result) != "4" {
		t.Fatalf("b after the protocol's completion: %+v, %v; want completed with 4", x, err)
	}
}

// Bad requests get the typed errors the Go API gives, as JSON, and
// change nothing; a request without the token gets nothing at all.
func TestWorkerAPIRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newAPI(t, f)
	if _, err := ffd.NewWorkerAPI(f.client, ffd.WorkerAPIConfig{}); err == nil {
		t.Fatal("a worker API without tokens was built; want a refusal")
	}
	x, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "api.bad"})
	if err != nil {
		t.Fatal(err)
	}
	id := x.Execution.ID.String()
	cases := []struct {
		name, token, op string
		body            any
		status          int
		code, field     string
	}{
		{"no token", "", "claim", map[string]any{"lane": "api.bad", "worker": "w"}, 401, "unauthorized", ""},
		{"wrong token", "not-the-token-at-all", "claim", map[string]any{"lane": "api.bad", "worker": "w"}, 401, "unauthorized", ""},
		{"malformed JSON", apiToken, "claim", `{"lane": `, 400, "validation", "body"},
		{"unknown field", apiToken, "claim", map[string]any{"lane": "api.bad", "lanes": "x"}, 400, "validation", "body"},
		{"bad lane", apiToken, "claim", map[string]any{"lane": "no spaces", "worker": "w"}, 400, "validation", "lane"},
		{"wait too long", apiToken, "claim", map[string]any{"lane": "api.bad", "worker": "w", "wait_ms": 3600000}, 400, "validation", "wait_ms"},
		{"malformed id", apiToken, "renew", map[string]any{"id": "nope", "epoch": 1}, 400, "validation", "execution_id"},
		{"epoch 0", apiToken, "complete", map[string]any{"id": id, "epoch": 0}, 400, "validation", "lease_epoch"},
		{"stale epoch", apiToken, "renew", map[string]any{"id": id, "epoch": 7}, 409, "lease_lost", ""},
		{"unknown op", apiToken, "claim-all", map[string]any{}, 404, "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.code == "" {
				req, _ := http.NewRequest(http.MethodPost, srv.URL+ffd.WorkerAPIPrefix+c.op, strings.NewReader("{}"))
				req.Header.Set("Authorization", "Bearer "+apiToken)
				resp, err := srv.Client().Do(req)
				if err != nil || resp.StatusCode != c.status {
					t.Fatalf("%s: %v %v, want %d", c.op, resp, err, c.status)
				}
				resp.Body.Close()
				return
			}
			status, out := apiCall(t, srv, c.token, c.op, c.body)
			e, _ := out["error"].(map[string]any)
			if status != c.status || e["code"] != c.code || (c.field != "" && e["field"] != c.field) {
				t.Fatalf("%s %v: %d %v; want %d, code %s, field %q", c.op, c.body, status, out, c.status, c.code, c.field)
			}
		})
	}
	got, err := f.client.Get(f.Ctx, x.Execution.ID)
	if err != nil || got.State != ffd.StatePending || got.Attempt != 0 {
		t.Fatalf("after the refusals: %+v, %v; want it pending and never claimed", got, err)
	}
}

// A watch on a running execution's lease answers with it as soon as the
// execution is cancelled, and the renewal it prompts says the lease is
// lost; a watch on leases nobody takes away answers none.
func TestWorkerAPIWatchHearsACancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	srv := newAPI(t, f)
	x, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "api.watch"})
	if err != nil {
		t.Fatal(err)
	}
	code, out := apiCall(t, srv, apiToken, "claim", map[string]any{"lane": "api.watch", "worker": "py/1", "wait_ms": 5000})
	xs, _ := out["executions"].([]any)
	if code != 200 || len(xs) != 1 {
		t.Fatalf("claim: %d %v", code, out)
	}
	job := xs[0].(map[string]any)
	lease := map[string]any{"id": job["id"], "epoch": job["epoch"]}
	if code, out := apiCall(t, srv, apiToken, "watch", map[string]any{"leases": []any{lease}, "wait_ms": 50}); code != 200 || len(out["revoked"].([]any)) != 0 {
		t.Fatalf("a watch with nothing taken away: %d %v, want none revoked", code, out)
	}
	type answer struct {
		code int
		out  map[string]any
	}
	got := make(chan answer, 1)
	go func() {
		code, out := apiCall(t, srv, apiToken, "watch", map[string]any{"leases": []any{lease}, "wait_ms": 30000})
		got <- answer{code, out}
	}()
	// Whether the watch is waiting when the cancel commits (ff_revoke
	// wakes it) or not yet (it reads the lease lost), it answers the lease.
	if _, err := f.client.Cancel(f.Ctx, x.Execution.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	a := <-got
	if a.code != 200 || fmt.Sprint(a.out["revoked"]) != fmt.Sprint([]any{job["id"]}) {
		t.Fatalf("watch: %d %v; want the cancelled lease", a.code, a.out)
	}
	if code, out := apiCall(t, srv, apiToken, "renew", lease); code != 409 || out["error"].(map[string]any)["state"] != "cancelled" {
		t.Fatalf("renew after the watch: %d %v, want lease_lost, cancelled", code, out)
	}
	if code, _ := apiCall(t, srv, apiToken, "watch", map[string]any{"leases": []any{}, "wait_ms": 10}); code != 400 {
		t.Fatalf("a watch of no lease: %d, want 400", code)
	}
}
