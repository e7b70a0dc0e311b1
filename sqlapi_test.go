package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

// sqlCall runs an SQL API function in db and decodes its JSON answer;
// an error comes back typed (fault.FromPg), as a Go caller would get it.
func sqlCall(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, fn string, args ...any) (map[string]any, error) {
	ph := ""
	for i := range args {
		if i > 0 {
			ph += ", "
		}
		ph += fmt.Sprintf("$%d", i+1)
	}
	var raw []byte
	if err := db.QueryRow(ctx, "SELECT "+fn+"("+ph+")::text", args...).Scan(&raw); err != nil {
		return nil, fault.FromPg(err)
	}
	var out map[string]any
	if len(raw) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			return nil, err
		}
	} else {
		out = map[string]any{"value": json.RawMessage(raw)}
	}
	return out, nil
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An execution created through SQL inside the caller's transaction
// exists when, and only when, that transaction commits, with what the
// Go API would have stored, placed where the Go API places it.
func TestSQLCreateCommitsWithTheCaller(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.Exec(`CREATE TABLE orders (id int PRIMARY KEY, execution text)`)
	params := mustJSON(t, map[string]any{"lane": "sql.orders", "kind": "charge", "payload": map[string]any{"order": 7},
		"priority": 3, "max_attempts": 2, "tags": map[string]string{"team": "billing"}})
	for _, commit := range []bool{false, true} {
		tx, err := f.Pool.Begin(f.Ctx)
		if err != nil {
			t.Fatal(err)
		}
		out, err := sqlCall(f.Ctx, tx, "ffd_create", params)
		if err != nil {
			t.Fatalf("ffd_create: %v", err)
		}
		if _, err := tx.Exec(f.Ctx, `INSERT INTO orders VALUES (7, $1)`, out["id"]); err != nil {
			t.Fatal(err)
		}
		if !commit {
			if err := tx.Rollback(f.Ctx); err != nil {
				t.Fatal(err)
			}
			if n := f.Count(`SELECT count(*) FROM ff_execution`); n != 0 {
				t.Fatalf("after a rollback %d executions exist, want none", n)
			}
			continue
		}
		if err := tx.Commit(f.Ctx); err != nil {
			t.Fatal(err)
		}
		id, err := ffd.ParseExecutionID(out["id"].(string))
		if err != nil {
			t.Fatal(err)
		}
		if want := ident.Partition(id.UUID); id.Partition != want || id.UUID.Version() != 7 {
			t.Fatalf("id %s: partition %d, uuid version %d; want the uuid's partition %d and a version 7 uuid", id, id.Partition, id.UUID.Version(), want)
		}
		x, err := f.client.Get(f.Ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if x.Lane != "sql.orders" || x.Kind != "charge" || string(x.Payload) != `{"order": 7}` || x.Priority != 3 ||
			x.MaxAttempts != 2 || x.LeaseTTL != ffd.DefaultLeaseTTL || x.Tags["team"] != "billing" || x.State != ffd.StatePending {
			t.Fatalf("created through SQL: %+v", x)
		}
	}
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
}

// An idempotency key is one key whichever API uses it: SQL and Go find
// each other's execution.
func TestSQLIdempotencyKeyIsTheGoAPIs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 20 {
		key := fmt.Sprintf("order-%d", i)
		first, err := sqlCall(f.Ctx, f.Pool, "ffd_create", mustJSON(t, map[string]any{"lane": "sql.keys", "idempotency_key": key}))
		if err != nil {
			t.Fatal(err)
		}
		again, err := sqlCall(f.Ctx, f.Pool, "ffd_create", mustJSON(t, map[string]any{"lane": "sql.keys", "idempotency_key": key}))
		if err != nil {
			t.Fatal(err)
		}
		res, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "sql.keys", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		if first["existed"] != false || again["existed"] != true || again["id"] != first["id"] || !res.Existed || res.Execution.ID.String() != first["id"] {
			t.Fatalf("key %s: SQL %v then %v, Go %s existed=%v; want one execution, found by all three", key, first, again, res.Execution.ID, res.Existed)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution`); n != 20 {
		t.Fatalf("%d executions, want 20", n)
	}
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
}

// The SQL API hashes and mints ids as the Go API does.
func TestSQLIDsAreTheGoAPIs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for i := range 300 {
		u := uuid.New()
		key := fmt.Sprintf("k%d-é-%d", i, i*7919)
		var part, keyPart int16
		var in, placed uuid.UUID
		if err := f.Pool.QueryRow(f.Ctx, `SELECT ffd_partition($1), ff_key_partition('ns', $2), ffd_uuid_in($3), ff_uuid_in_partition($1, $3::smallint)`,
			u, key, int16(i%256)).Scan(&part, &keyPart, &in, &placed); err != nil {
			t.Fatal(err)
		}
		if want := ident.InPartition(u, int16(i%256)); placed != want {
			t.Fatalf("ff_uuid_in_partition(%s, %d) = %s, want %s (ident.InPartition)", u, i%256, placed, want)
		}
		if part != ident.Partition(u) || keyPart != ident.KeyPartition("ns", key) || ident.Partition(in) != int16(i%256) || in.Version() != 7 {
			t.Fatalf("uuid %s: partition %d (Go %d); key %q: %d (Go %d); uuid on %d: %s (its partition %d)",
				u, part, ident.Partition(u), key, keyPart, ident.KeyPartition("ns", key), i%256, in, ident.Partition(in))
		}
	}
}

var _ = errors.Is

// refusal is one bad input given to the Go API and to the SQL API.
type refusal struct {
	name  string
	goAPI func(context.Context, *fixture) error
	fn    string // the SQL function
	args  []any  // its arguments (a map or slice is sent as JSON text)
}

func createCase(name string, p ffd.CreateParams, sql map[string]any) refusal {
	return refusal{name: "create: " + name, fn: "ffd_create", args: []any{sql},
		goAPI: func(ctx context.Context, f *fixture) error { _, err := f.client.Create(ctx, p); return err }}
}

func flowCase(name string, p ffd.SubmitFlowParams, sql map[string]any) refusal {
	return refusal{name: "flow: " + name, fn: "ffd_submit_flow", args: []any{sql},
		goAPI: func(ctx context.Context, f *fixture) error { _, err := f.client.SubmitFlow(ctx, p); return err }}
}

func node(ref, lane string) ffd.SubmitNode {
	return ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}}
}

func sqlNode(ref, lane string) map[string]any { return map[string]any{"ref": ref, "lane": lane} }

func edge(from, to string) ffd.SubmitEdge { return ffd.SubmitEdge{From: from, To: to} }

func sqlEdge(from, to string) map[string]any { return map[string]any{"from": from, "to": to} }

func createRefusals() []refusal {
	caps := make([]string, 65)
	for i := range caps {
		caps[i] = fmt.Sprintf("c%d", i)
	}
	big := strings.Repeat("k", 300)
	return []refusal{
		createCase("no lane", ffd.CreateParams{}, map[string]any{}),
		createCase("bad lane", ffd.CreateParams{Lane: "no spaces"}, map[string]any{"lane": "no spaces"}),
		createCase("sub-flow lane", ffd.CreateParams{Lane: "ffd.subflow"}, map[string]any{"lane": "ffd.subflow"}),
		createCase("bad namespace", ffd.CreateParams{Lane: "l", Namespace: "a/b"}, map[string]any{"lane": "l", "namespace": "a/b"}),
		createCase("long kind", ffd.CreateParams{Lane: "l", Kind: big}, map[string]any{"lane": "l", "kind": big}),
		createCase("payload too large", ffd.CreateParams{Lane: "l", JSON: strings.Repeat("x", 1<<20)},
			map[string]any{"lane": "l", "payload": strings.Repeat("x", 1<<20)}),
		createCase("priority", ffd.CreateParams{Lane: "l", Priority: 1 << 31}, map[string]any{"lane": "l", "priority": 1 << 31}),
		createCase("too many capabilities", ffd.CreateParams{Lane: "l", RequiredCapabilities: caps}, map[string]any{"lane": "l", "capabilities": caps}),
		createCase("empty capability", ffd.CreateParams{Lane: "l", RequiredCapabilities: []string{""}}, map[string]any{"lane": "l", "capabilities": []string{""}}),
		createCase("version capability", ffd.CreateParams{Lane: "l", RequiredCapabilities: []string{"ffd.version:2"}},
			map[string]any{"lane": "l", "capabilities": []string{"ffd.version:2"}}),
		createCase("max attempts", ffd.CreateParams{Lane: "l", MaxAttempts: 1001}, map[string]any{"lane": "l", "max_attempts": 1001}),
		createCase("negative attempts", ffd.CreateParams{Lane: "l", MaxAttempts: -1}, map[string]any{"lane": "l", "max_attempts": -1}),
		createCase("short lease", ffd.CreateParams{Lane: "l", LeaseTTL: 500 * time.Millisecond}, map[string]any{"lane": "l", "lease_ttl": 500}),
		createCase("long attempt", ffd.CreateParams{Lane: "l", AttemptTimeout: 8 * 24 * time.Hour}, map[string]any{"lane": "l", "attempt_timeout": "8 days"}),
		createCase("negative delay", ffd.CreateParams{Lane: "l", Delay: -time.Second}, map[string]any{"lane": "l", "delay": -1000}),
		createCase("long key", ffd.CreateParams{Lane: "l", IdempotencyKey: strings.Repeat("x", 513)},
			map[string]any{"lane": "l", "idempotency_key": strings.Repeat("x", 513)}),
		createCase("large tags", ffd.CreateParams{Lane: "l", Tags: map[string]any{"t": strings.Repeat("x", 70000)}},
			map[string]any{"lane": "l", "tags": map[string]any{"t": strings.Repeat("x", 70000)}}),
		{name: "create many: too many", fn: "ffd_create_many", args: []any{make([]map[string]any, 10001)},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.CreateMany(ctx, make([]ffd.CreateParams, 10001))
				return err
			}},
		{name: "create many: a key", fn: "ffd_create_many", args: []any{[]map[string]any{{"lane": "l"}, {"lane": "l", "idempotency_key": "k"}}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.CreateMany(ctx, []ffd.CreateParams{{Lane: "l"}, {Lane: "l", IdempotencyKey: "k"}})
				return err
			}},
		{name: "create many: a bad row", fn: "ffd_create_many", args: []any{[]map[string]any{{"lane": "l"}, {"lane": "l l"}}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.CreateMany(ctx, []ffd.CreateParams{{Lane: "l"}, {Lane: "l l"}})
				return err
			}},
	}
}

func flowRefusals() []refusal {
	quorum := &ffd.Policy{Kind: ffd.Quorum, K: 3}
	return []refusal{
		flowCase("no nodes", ffd.SubmitFlowParams{}, map[string]any{"nodes": []any{}}),
		flowCase("duplicate ref", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l"), node("a", "l")}},
			map[string]any{"nodes": []any{sqlNode("a", "l"), sqlNode("a", "l")}}),
		flowCase("empty ref", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("", "l")}}, map[string]any{"nodes": []any{sqlNode("", "l")}}),
		flowCase("unknown edge end", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l")}, Edges: []ffd.SubmitEdge{edge("a", "z")}},
			map[string]any{"nodes": []any{sqlNode("a", "l")}, "edges": []any{sqlEdge("a", "z")}}),
		flowCase("self edge", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l")}, Edges: []ffd.SubmitEdge{edge("a", "a")}},
			map[string]any{"nodes": []any{sqlNode("a", "l")}, "edges": []any{sqlEdge("a", "a")}}),
		flowCase("duplicate edge", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l"), node("b", "l")}, Edges: []ffd.SubmitEdge{edge("a", "b"), edge("a", "b")}},
			map[string]any{"nodes": []any{sqlNode("a", "l"), sqlNode("b", "l")}, "edges": []any{sqlEdge("a", "b"), sqlEdge("a", "b")}}),
		flowCase("cycle", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("r", "l"), node("a", "l"), node("b", "l")},
			Edges: []ffd.SubmitEdge{edge("r", "a"), edge("a", "b"), edge("b", "a")}},
			map[string]any{"nodes": []any{sqlNode("r", "l"), sqlNode("a", "l"), sqlNode("b", "l")},
				"edges": []any{sqlEdge("r", "a"), sqlEdge("a", "b"), sqlEdge("b", "a")}}),
		flowCase("policy on a root", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "l"}, Policy: &ffd.Policy{Kind: ffd.AnyOf}}}},
			map[string]any{"nodes": []any{map[string]any{"ref": "a", "lane": "l", "policy": map[string]any{"kind": "any_of"}}}}),
		flowCase("quorum beyond the edges", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l"), node("b", "l"), {Ref: "c", Params: ffd.CreateParams{Lane: "l"}, Policy: quorum}},
			Edges: []ffd.SubmitEdge{edge("a", "c"), edge("b", "c")}},
			map[string]any{"nodes": []any{sqlNode("a", "l"), sqlNode("b", "l"), map[string]any{"ref": "c", "lane": "l", "policy": map[string]any{"kind": "quorum", "k": 3}}},
				"edges": []any{sqlEdge("a", "c"), sqlEdge("b", "c")}}),
		flowCase("bad policy", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l"), {Ref: "b", Params: ffd.CreateParams{Lane: "l"}, Policy: &ffd.Policy{Kind: "most_of"}}},
			Edges: []ffd.SubmitEdge{edge("a", "b")}},
			map[string]any{"nodes": []any{sqlNode("a", "l"), map[string]any{"ref": "b", "lane": "l", "policy": map[string]any{"kind": "most_of"}}},
				"edges": []any{sqlEdge("a", "b")}}),
		flowCase("node key", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "l", IdempotencyKey: "k"}}}},
			map[string]any{"nodes": []any{map[string]any{"ref": "a", "lane": "l", "idempotency_key": "k"}}}),
		flowCase("node lane", ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "l"), node("b", "")}},
			map[string]any{"nodes": []any{sqlNode("a", "l"), sqlNode("b", "")}}),
		flowCase("long kind", ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{Kind: strings.Repeat("x", 257)}, Nodes: []ffd.SubmitNode{node("a", "l")}},
			map[string]any{"kind": strings.Repeat("x", 257), "nodes": []any{sqlNode("a", "l")}}),
	}
}

func otherRefusals(done ffd.ExecutionID, doneFlow uuid.UUID) []refusal {
	missing := ffd.ExecutionID{Partition: 3, UUID: uuid.New()}
	return []refusal{
		{name: "cancel: malformed id", fn: "ffd_cancel", args: []any{"nope"},
			goAPI: func(ctx context.Context, f *fixture) error { _, err := ffd.ParseExecutionID("nope"); return err }},
		{name: "cancel: missing", fn: "ffd_cancel", args: []any{missing.String()},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Cancel(ctx, missing, "", "")
				return err
			}},
		{name: "cancel: completed", fn: "ffd_cancel", args: []any{done.String()},
			goAPI: func(ctx context.Context, f *fixture) error { _, err := f.client.Cancel(ctx, done, "", ""); return err }},
		{name: "cancel: long reason", fn: "ffd_cancel", args: []any{done.String(), strings.Repeat("x", 5000)},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Cancel(ctx, done, strings.Repeat("x", 5000), "")
				return err
			}},
		{name: "cancel flow: policy", fn: "ffd_cancel_flow", args: []any{doneFlow.String(), "everything"},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.CancelFlow(ctx, doneFlow, "everything", "")
				return err
			}},
		{name: "cancel flow: missing", fn: "ffd_cancel_flow", args: []any{missing.UUID.String()},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.CancelFlow(ctx, missing.UUID, ffd.CancelAll, "")
				return err
			}},
		{name: "signal: bad name", fn: "ffd_signal", args: []any{map[string]any{"flow_id": doneFlow, "name": "a b"}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Signal(ctx, ffd.SignalParams{FlowID: &doneFlow, Name: "a b"})
				return err
			}},
		{name: "signal: two targets", fn: "ffd_signal", args: []any{map[string]any{"flow_id": doneFlow, "execution_id": done, "name": "go"}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Signal(ctx, ffd.SignalParams{FlowID: &doneFlow, Execution: &done, Name: "go"})
				return err
			}},
		{name: "signal: finished flow", fn: "ffd_signal", args: []any{map[string]any{"flow_id": doneFlow, "name": "go"}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Signal(ctx, ffd.SignalParams{FlowID: &doneFlow, Name: "go"})
				return err
			}},
		{name: "signal: missing execution", fn: "ffd_signal", args: []any{map[string]any{"execution_id": missing, "name": "go"}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.Signal(ctx, ffd.SignalParams{Execution: &missing, Name: "go"})
				return err
			}},
		{name: "publish: bad name", fn: "ffd_publish", args: []any{map[string]any{"name": "a b"}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.PublishEvent(ctx, ffd.PublishParams{Name: "a b"})
				return err
			}},
		{name: "publish: long key", fn: "ffd_publish", args: []any{map[string]any{"name": "e", "key": strings.Repeat("x", 513)}},
			goAPI: func(ctx context.Context, f *fixture) error {
				_, err := f.client.PublishEvent(ctx, ffd.PublishParams{Name: "e", Key: strings.Repeat("x", 513)})
				return err
			}},
	}
}

// Bad input through SQL gets the typed error the Go API gives for the
// same input (the same code, kind and field), and writes nothing.
func TestSQLRefusesAsTheGoAPIDoes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	done, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "sql.done"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.Cancel(f.Ctx, done.Execution.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	flow, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "sql.done")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CancelFlow(f.Ctx, flow.Flow.ID, ffd.CancelFlowOnly, ""); err != nil {
		t.Fatal(err)
	}
	// A completed execution and flow: refuse a cancel as already terminal.
	x, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "sql.fin"})
	if err != nil {
		t.Fatal(err)
	}
	fin := x.Execution.ID
	claimAndComplete(t, f, "sql.fin")
	cases := append(append(createRefusals(), flowRefusals()...), otherRefusals(fin, flow.Flow.ID)...)
	cases = append(cases, refusal{name: "create: malformed JSON", fn: "ffd_create", args: []any{`{"lane": `},
		goAPI: func(context.Context, *fixture) error {
			return fault.Invalid(ffd.KindInvalidValue, "params", "", "not JSON")
		}})
	counts := `SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_flow) + (SELECT count(*) FROM ff_event) + (SELECT count(*) FROM ff_signal)`
	before := f.Count(counts)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			goErr := c.goAPI(f.Ctx, f)
			args := make([]any, len(c.args))
			for i, a := range c.args {
				if s, ok := a.(string); ok {
					args[i] = s
				} else {
					args[i] = mustJSON(t, a)
				}
			}
			_, sqlErr := sqlCall(f.Ctx, f.Pool, c.fn, args...)
			g, s := fault.ToWire(goErr), fault.ToWire(sqlErr)
			if goErr == nil || sqlErr == nil || g.Code == fault.CodeInternal || g.Code != s.Code || g.Kind != s.Kind || g.Field != s.Field {
				t.Fatalf("Go: %v (%s %s %s)\nSQL: %v (%s %s %s)\nwant the same typed error", goErr, g.Code, g.Kind, g.Field, sqlErr, s.Code, s.Kind, s.Field)
			}
		})
	}
	if after := f.Count(counts); after != before {
		t.Fatalf("the refusals wrote %d rows, want none", after-before)
	}
}

// claimAndComplete runs one execution of lane to completion.
func claimAndComplete(t *testing.T, f *fixture, lane string) {
	t.Helper()
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: lane, Worker: "t/1"})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim %s: %v %v", lane, xs, err)
	}
	if _, err := f.client.Complete(f.Ctx, xs[0].ID, xs[0].LeaseEpoch, []byte(`1`)); err != nil {
		t.Fatal(err)
	}
}

// A flow submitted through SQL runs like one submitted through Go: its
// join waits for its quorum, each step is claimed by its lane's worker,
// and the flow's state reads back through ffd_flow.
func TestSQLSubmittedFlowRuns(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sql.flow"}, PollInterval: 50 * time.Millisecond,
		Handler: func(_ context.Context, j *ffd.Job) ([]byte, error) { return []byte(`"` + j.Step + `"`), nil }})
	params := mustJSON(t, map[string]any{"kind": "sql-demo", "tags": map[string]any{"from": "sql"},
		"nodes": []any{sqlNode("a", "sql.flow"), sqlNode("b", "sql.flow"), sqlNode("c", "sql.flow"),
			map[string]any{"ref": "join", "lane": "sql.flow", "policy": map[string]any{"kind": "quorum", "k": 2, "on_satisfied": "let_run"}}},
		"edges": []any{sqlEdge("a", "join"), sqlEdge("b", "join"), sqlEdge("c", "join")}})
	out, err := sqlCall(f.Ctx, f.Pool, "ffd_submit_flow", params)
	if err != nil {
		t.Fatal(err)
	}
	fid, err := uuid.Parse(out["flow_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(out["executions"].(map[string]any)); got != 4 {
		t.Fatalf("executions = %v, want the four refs", out["executions"])
	}
	var state string
	f.WaitFor("the SQL flow to finish", func() bool {
		fl, err := sqlCall(f.Ctx, f.Pool, "ffd_flow", fid.String())
		if err != nil {
			t.Fatal(err)
		}
		state = fl["state"].(string)
		return state != "open"
	})
	fl, err := sqlCall(f.Ctx, f.Pool, "ffd_flow", fid.String())
	if err != nil {
		t.Fatal(err)
	}
	join := fl["members"].(map[string]any)["join"].(map[string]any)
	if state != "completed" || join["state"] != "completed" || join["result"] != "join" || fl["node_count"] != 4.0 || fl["edge_count"] != 3.0 {
		t.Fatalf("flow read through SQL: %v", fl)
	}
	d, err := f.client.DescribeFlow(f.Ctx, fid)
	if err != nil || d.Kind != "sql-demo" || len(d.Groups) != 1 || d.Groups[0].Policy.K != 2 {
		t.Fatalf("the flow as Go reads it: %+v, %v", d, err)
	}
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
}

// ffd_create_many creates a batch in order; ffd_execution reads each.
func TestSQLCreateMany(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var raw []byte
	batch := []map[string]any{{"lane": "sql.many", "payload": 1}, {"lane": "sql.many", "payload": 2, "delay": "1 hour"}, {"lane": "sql.other", "kind": "k"}}
	if err := f.Pool.QueryRow(f.Ctx, `SELECT ffd_create_many($1)::text`, mustJSON(t, batch)).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var ids []string
	if err := json.Unmarshal(raw, &ids); err != nil || len(ids) != 3 {
		t.Fatalf("ffd_create_many answered %s, %v; want three ids", raw, err)
	}
	for i, id := range ids {
		x, err := sqlCall(f.Ctx, f.Pool, "ffd_execution", id)
		if err != nil {
			t.Fatal(err)
		}
		if x["lane"] != batch[i]["lane"] || (batch[i]["payload"] != nil && x["payload"] != float64(batch[i]["payload"].(int))) {
			t.Fatalf("execution %d: %v, want %v", i, x, batch[i])
		}
	}
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "sql.many", Worker: "t/1", Max: 10})
	if err != nil || len(xs) != 1 || xs[0].ID.String() != ids[0] {
		t.Fatalf("claim: %v %v; want only the first (the second is delayed an hour)", xs, err)
	}
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
}

// ffd_cancel fences a running execution (its holder's lease is lost) and
// repeats as a no-op; ffd_cancel_flow cancels a flow's live members.
func TestSQLCancels(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	x, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "sql.cancel"})
	if err != nil {
		t.Fatal(err)
	}
	xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "sql.cancel", Worker: "t/1"})
	if err != nil || len(xs) != 1 {
		t.Fatal(xs, err)
	}
	out, err := sqlCall(f.Ctx, f.Pool, "ffd_cancel", x.Execution.ID.String(), "no longer wanted", "shop")
	if err != nil || out["state"] != "cancelled" || out["repeated"] != false {
		t.Fatalf("ffd_cancel: %v, %v", out, err)
	}
	if _, err := f.client.Renew(f.Ctx, xs[0].ID, xs[0].LeaseEpoch); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Fatalf("renew after the cancel: %v, want lease lost", err)
	}
	got, err := f.client.Get(f.Ctx, x.Execution.ID)
	if err != nil || got.CancellationReason != "no longer wanted" || got.CancelledBy != "shop" {
		t.Fatalf("cancelled: %+v, %v", got, err)
	}
	if out, err := sqlCall(f.Ctx, f.Pool, "ffd_cancel", x.Execution.ID.String()); err != nil || out["repeated"] != true {
		t.Fatalf("repeat: %v, %v; want repeated", out, err)
	}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{node("a", "sql.cf"), node("b", "sql.cf")},
		Edges: []ffd.SubmitEdge{edge("a", "b")}})
	if err != nil {
		t.Fatal(err)
	}
	out, err = sqlCall(f.Ctx, f.Pool, "ffd_cancel_flow", sub.Flow.ID.String())
	if err != nil || len(out["members"].([]any)) != 2 || out["policy"] != "cancel_all" {
		t.Fatalf("ffd_cancel_flow: %v, %v; want both members cancelled", out, err)
	}
	d, err := f.client.DescribeFlow(f.Ctx, sub.Flow.ID)
	if err != nil || d.State != ffd.FlowCancelled {
		t.Fatalf("flow: %+v, %v", d, err)
	}
	if out, err := sqlCall(f.Ctx, f.Pool, "ffd_cancel_flow", sub.Flow.ID.String()); err != nil || out["repeated"] != true {
		t.Fatalf("repeat: %v, %v", out, err)
	}
	if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
}

// ffd_signal wakes an execution waiting for the signal, handing it the
// payload; ffd_publish starts what a trigger asks for, once per key.
func TestSQLSignalsAndPublishes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	got := make(chan string, 1)
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"sql.wait"}, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, j *ffd.Job) ([]byte, error) {
			w, err := j.Wake(ctx)
			if err != nil {
				return nil, err
			}
			if w == nil {
				return nil, ffd.WaitForSignal("approve", time.Hour)
			}
			got <- string(w.Received.Payload)
			return nil, nil
		}})
	x, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "sql.wait"})
	if err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the execution to wait", func() bool {
		w, err := f.client.Wake(f.Ctx, x.Execution.ID)
		return err == nil && w != nil
	})
	out, err := sqlCall(f.Ctx, f.Pool, "ffd_signal", mustJSON(t, map[string]any{"execution_id": x.Execution.ID, "name": "approve", "payload": map[string]bool{"ok": true}}))
	if err != nil || out["woke"] != x.Execution.ID.String() {
		t.Fatalf("ffd_signal: %v, %v; want it to wake %s", out, err, x.Execution.ID)
	}
	select {
	case p := <-got:
		if p != `{"ok": true}` {
			t.Fatalf("the handler got %q", p)
		}
	case <-f.Ctx.Done():
		t.Fatal("the signalled execution never ran again")
	}
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "on-order", Event: "order.placed",
		Execution: &ffd.CreateParams{Lane: "sql.triggered"}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := sqlCall(f.Ctx, f.Pool, "ffd_publish", mustJSON(t, map[string]any{"name": "order.placed", "key": "o-1", "payload": map[string]int{"n": 1}})); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitFor("the trigger to start its execution", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'sql.triggered'`) > 0
	})
	if n := f.Count(`SELECT count(*) FROM ff_event`); n != 1 {
		t.Fatalf("%d events for one key published twice, want 1", n)
	}
}

// Every migrate up marks the SQL API as its binary's; a function another
// binary left is reported, and a migrate up replaces it.
func TestSQLAPIKnowsItsBinary(t *testing.T) {
	t.Parallel()
	f := setup(t)
	current, err := schema.APICurrent(f.Ctx, f.Pool)
	if err != nil || !current {
		t.Fatalf("after the migrations: current %v, %v; want the SQL API this binary's", current, err)
	}
	f.Exec(`CREATE OR REPLACE FUNCTION ffd_api_mark() RETURNS text LANGUAGE sql IMMUTABLE AS $$SELECT 'ffd SQL API of an older binary'$$`)
	if current, err := schema.APICurrent(f.Ctx, f.Pool); err != nil || current {
		t.Fatalf("with another binary's mark: current %v, %v; want false", current, err)
	}
	if err := schema.InstallAPI(f.Ctx, f.Pool); err != nil {
		t.Fatal(err)
	}
	if current, err := schema.APICurrent(f.Ctx, f.Pool); err != nil || !current {
		t.Fatalf("after installing again: current %v, %v; want true", current, err)
	}
	f.Exec(`DROP FUNCTION ffd_create(text)`)
	f.Exec(`DROP FUNCTION ffd_create(jsonb)`)
	if current, err := schema.APICurrent(f.Ctx, f.Pool); err != nil || current {
		t.Fatalf("without the functions: current %v, %v; want false", current, err)
	}
}

// The SQL API's checks of integer fields are rendered from the Go API's
// ranges: at and just past each bound, both accept or both refuse.
func TestSQLRangesAreTheGoAPIs(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, r := range []fault.Range{leases.PriorityRange, leases.MaxAttemptsRange, leases.LeaseTTLRange,
		leases.AttemptTimeoutRange, leases.DeadlineRange, leases.DelayRange} {
		unit := int64(1)
		if r.Scale > 1 {
			unit = int64(time.Millisecond) // the SQL API reads durations in milliseconds
		}
		for _, v := range []int64{0, r.Min - unit, r.Min, r.Max, r.Max + unit} {
			input := float64(v / unit)
			var goErr error
			if !r.Holds(v) {
				goErr = r.Refusal(fmt.Sprint(v))
			}
			if r.Field == "max_attempts" && v == 0 || r.Field == "lease_ttl" && v == 0 {
				goErr = nil // 0 takes the default
			}
			tx, err := f.Pool.Begin(f.Ctx)
			if err != nil {
				t.Fatal(err)
			}
			_, sqlErr := sqlCall(f.Ctx, tx, "ffd_create", mustJSON(t, map[string]any{"lane": "sql.ranges", r.Field: input}))
			_ = tx.Rollback(f.Ctx)
			if (goErr == nil) != (sqlErr == nil) || (sqlErr != nil && fault.ToWire(sqlErr).Field != r.Field) {
				t.Errorf("%s = %v: Go %v, SQL %v; want the same answer", r.Field, input, goErr, sqlErr)
			}
		}
	}
}
