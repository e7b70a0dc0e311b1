package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
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
		var in uuid.UUID
		if err := f.Pool.QueryRow(f.Ctx, `SELECT ffd_partition($1), ffd_key_partition('ns', $2), ffd_uuid_in($3)`, u, key, int16(i%256)).Scan(&part, &keyPart, &in); err != nil {
			t.Fatal(err)
		}
		if part != ident.Partition(u) || keyPart != ident.KeyPartition("ns", key) || ident.Partition(in) != int16(i%256) || in.Version() != 7 {
			t.Fatalf("uuid %s: partition %d (Go %d); key %q: %d (Go %d); uuid on %d: %s (its partition %d)",
				u, part, ident.Partition(u), key, keyPart, ident.KeyPartition("ns", key), i%256, in, ident.Partition(in))
		}
	}
}

var _ = errors.Is
