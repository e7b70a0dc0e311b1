//go:build citus

package citus_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/schema"
)

// sqlCall runs an SQL API function on the coordinator and decodes its
// answer; an error comes back typed.
func (f *fixture) sqlCall(fn string, args ...any) (map[string]any, error) {
	marks := ""
	for i := range args {
		if i > 0 {
			marks += ", "
		}
		marks += "$" + string(rune('1'+i))
	}
	var raw []byte
	if err := f.pool.QueryRow(f.ctx, "SELECT "+fn+"("+marks+")::text", args...).Scan(&raw); err != nil {
		return nil, fault.FromPg(err)
	}
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		return map[string]any{"value": string(raw)}, nil
	}
	return out, nil
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The SQL API on a distributed Postgres: executions and a flow created
// through it run, a running execution and a flow are cancelled through
// it (the routed ending), a signal and an event land, and refusals are
// typed.
func TestSQLAPIOnCitus(t *testing.T) {
	t.Parallel()
	f := setupFor(t, 4*time.Minute)
	f.daemon(t)
	lane := f.lane("sql")
	x, err := f.sqlCall("ffd_create", asJSON(t, map[string]any{"lane": lane, "idempotency_key": f.prefix + "-k"}))
	if err != nil {
		t.Fatalf("ffd_create: %v", err)
	}
	again, err := f.sqlCall("ffd_create", asJSON(t, map[string]any{"lane": lane, "idempotency_key": f.prefix + "-k"}))
	if err != nil || again["id"] != x["id"] || again["existed"] != true {
		t.Fatalf("ffd_create again: %v, %v; want the first, existed", again, err)
	}
	if _, err := f.sqlCall("ffd_create_many", asJSON(t, []map[string]any{{"lane": lane}, {"lane": lane}})); err != nil {
		t.Fatalf("ffd_create_many: %v", err)
	}
	xs, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 10})
	if err != nil || len(xs) != 3 {
		t.Fatalf("claim what SQL created: %d, %v; want 3", len(xs), err)
	}
	out, err := f.sqlCall("ffd_cancel", xs[0].ID.String(), "stop", "sql")
	if err != nil || out["state"] != "cancelled" {
		t.Fatalf("ffd_cancel of a running execution: %v, %v", out, err)
	}
	if _, err := f.client.Renew(f.ctx, xs[0].ID, xs[0].LeaseEpoch); !errors.Is(err, ffd.ErrLeaseLost) {
		t.Fatalf("renew after the SQL cancel: %v, want lease lost", err)
	}
	for _, x := range xs[1:] {
		if _, err := f.client.Complete(f.ctx, x.ID, x.LeaseEpoch, nil); err != nil {
			t.Fatal(err)
		}
	}
	flowLane := f.lane("sqlflow")
	sub, err := f.sqlCall("ffd_submit_flow", asJSON(t, map[string]any{
		"nodes": []any{map[string]any{"ref": "a", "lane": flowLane}, map[string]any{"ref": "b", "lane": flowLane}},
		"edges": []any{map[string]any{"from": "a", "to": "b"}}}))
	if err != nil {
		t.Fatalf("ffd_submit_flow: %v", err)
	}
	fid := uuid.MustParse(sub["flow_id"].(string))
	if _, err := f.sqlCall("ffd_signal", asJSON(t, map[string]any{"flow_id": fid, "name": "go"})); err != nil {
		t.Fatalf("ffd_signal: %v", err)
	}
	if _, err := f.sqlCall("ffd_publish", asJSON(t, map[string]any{"name": "sql.event", "key": f.prefix})); err != nil {
		t.Fatalf("ffd_publish: %v", err)
	}
	first, err := f.client.Claim(f.ctx, ffd.ClaimParams{Lane: flowLane, Worker: "w/1"})
	if err != nil || len(first) != 1 {
		t.Fatalf("claim the flow's root: %d, %v", len(first), err)
	}
	out, err = f.sqlCall("ffd_cancel_flow", fid.String())
	if err != nil || len(out["members"].([]any)) != 2 {
		t.Fatalf("ffd_cancel_flow: %v, %v; want both members", out, err)
	}
	fl, err := f.sqlCall("ffd_flow", fid.String())
	if err != nil || fl["state"] != "cancelled" {
		t.Fatalf("ffd_flow: %v, %v; want cancelled", fl, err)
	}
	var ve *ffd.ValidationError
	if _, err := f.sqlCall("ffd_create", `{"lane": "no spaces"}`); !errors.As(err, &ve) || ve.Field != "lane" {
		t.Fatalf("a bad lane: %v, want a validation error of field lane", err)
	}
	if _, err := f.sqlCall("ffd_cancel", xs[0].ID.String()); err != nil {
		t.Fatalf("a repeated cancel: %v", err)
	}
	if _, err := f.sqlCall("ffd_cancel", xs[1].ID.String()); !errors.Is(err, ffd.ErrAlreadyTerminal) {
		t.Fatalf("cancelling a completed execution: %v, want already terminal", err)
	}
}

// The SQL API is this binary's on every node, so a process whose front
// door is a worker node (docs/scaling.md) is not told to migrate again
// (Citus copies functions to every node but not their comments), and the
// API creates through that node.
func TestSQLAPIOnEveryNode(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rows, err := f.pool.Query(f.ctx, `SELECT nodename, nodeport FROM pg_dist_node
		WHERE isactive AND noderole = 'primary' AND groupid > 0 ORDER BY nodeport`)
	if err != nil {
		t.Fatal(err)
	}
	type node struct {
		Host string
		Port int
	}
	nodes, err := pgx.CollectRows(rows, pgx.RowToStructByPos[node])
	if err != nil || len(nodes) == 0 {
		t.Fatalf("worker nodes: %v, %v; want at least one", nodes, err)
	}
	cfg, err := pgxpool.ParseConfig(coordinator)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		cfg := cfg.Copy()
		cfg.ConnConfig.Host, cfg.ConnConfig.Port = n.Host, uint16(n.Port)
		pool, err := pgxpool.NewWithConfig(f.ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		current, err := schema.APICurrent(f.ctx, pool)
		if err != nil || !current {
			pool.Close()
			t.Fatalf("through the worker node on port %d: current %v, %v; want the SQL API this binary's", n.Port, current, err)
		}
		var raw string
		err = pool.QueryRow(f.ctx, `SELECT ffd_create($1)::text`, asJSON(t, map[string]any{"lane": f.lane("front")})).Scan(&raw)
		pool.Close()
		if err != nil || !strings.Contains(raw, `"state": "pending"`) {
			t.Fatalf("ffd_create through the worker node on port %d: %s, %v; want a pending execution", n.Port, raw, err)
		}
	}
}
