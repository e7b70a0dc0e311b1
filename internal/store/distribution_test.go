package store_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The migrated schema can be distributed by partition_key: .ci/run runs
// this by name, so a migration that adds a unique index or a foreign key
// a distributed Postgres cannot enforce fails CI.
func TestSchemaIsDistributable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)

	tables, bad, err := store.CheckDistribution(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range bad {
		t.Errorf("not distributable: %s", v)
	}
	kinds := map[string]string{}
	for _, d := range tables {
		kinds[d.Table] = d.Kind
	}
	for _, name := range []string{"ff_execution", "ff_flow", "ff_edge", "ff_edge_group", "ff_attempt",
		"ff_completion_event", "ff_lease_event", "ff_pending_cancel_group"} {
		if kinds[name] != "distributed" {
			t.Errorf("%s is %q, want distributed", name, kinds[name])
		}
	}
	for _, name := range store.ReferenceTables {
		if kinds[name] != "reference" {
			t.Errorf("%s is %q, want reference (is it in the schema?)", name, kinds[name])
		}
	}
	for _, name := range store.LaneTables {
		if kinds[name] != "lane" {
			t.Errorf("%s is %q, want lane (is it in the schema?)", name, kinds[name])
		}
	}
}

// Each kind of key a distributed Postgres refuses is reported.
func TestCheckDistributionFindsViolations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, `
		CREATE UNIQUE INDEX ff_execution_bad_global ON ff_execution (namespace, lane) WHERE kind = 'never';
		CREATE UNIQUE INDEX ff_key_bad_global ON ff_key (key) WHERE weight = 999;
		CREATE TABLE ff_unplaced (id int PRIMARY KEY);
		CREATE TABLE ff_bad_child (partition_key smallint, execution_id uuid, other_partition smallint,
			PRIMARY KEY (partition_key, execution_id),
			CONSTRAINT ff_bad_child_fk FOREIGN KEY (other_partition, execution_id) REFERENCES ff_execution (partition_key, execution_id));
		ALTER TABLE ff_schedule ADD COLUMN p smallint, ADD COLUMN x uuid,
			ADD CONSTRAINT ff_schedule_bad_fk FOREIGN KEY (p, x) REFERENCES ff_execution (partition_key, execution_id);
		CREATE TABLE ff_good_child (partition_key smallint, execution_id uuid, lane text REFERENCES ff_lane (lane),
			PRIMARY KEY (partition_key, execution_id),
			FOREIGN KEY (partition_key, execution_id) REFERENCES ff_execution (partition_key, execution_id));
		CREATE FUNCTION ff_bad_notify() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN PERFORM pg_notify('x', ''); RETURN NULL; END$$;
		CREATE TRIGGER ff_bad_notify AFTER INSERT ON ff_completion_event FOR EACH STATEMENT EXECUTE FUNCTION ff_bad_notify();
		CREATE TRIGGER ff_bad_notify AFTER INSERT ON ff_lane FOR EACH STATEMENT EXECUTE FUNCTION ff_bad_notify();
		CREATE TRIGGER ff_bad_notify AFTER INSERT ON ff_schema_version FOR EACH STATEMENT EXECUTE FUNCTION ff_bad_notify();`); err != nil {
		t.Fatal(err)
	}
	_, bad, err := store.CheckDistribution(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range bad {
		got = append(got, v.Table+" "+v.Object)
	}
	want := []string{
		"ff_bad_child foreign key ff_bad_child_fk",
		"ff_completion_event trigger ff_bad_notify",
		"ff_lane trigger ff_bad_notify",
		"ff_schema_version trigger ff_bad_notify", // a reference table: every process reads it on its node
		"ff_execution unique index ff_execution_bad_global",
		"ff_key unique index ff_key_bad_global", // distributed by lane, which it omits
		"ff_schedule foreign key ff_schedule_bad_fk",
		"ff_unplaced table",
		"ff_unplaced primary key ff_unplaced_pkey",
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// The Citus script places reference tables first, then the lane tables
// together, and every distributed table after the tables it references,
// co-located with the flow.
func TestCitusScript(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	tables, _, err := store.CheckDistribution(ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	script := store.CitusScript(tables)
	lines := strings.Split(strings.TrimSpace(script), "\n")
	at := map[string]int{}
	for i, l := range lines {
		if q := strings.IndexByte(l, '\''); q >= 0 {
			name := l[q+1:]
			at[name[:strings.IndexByte(name, '\'')]] = i
		}
	}
	if len(lines) != len(tables)-len(store.LocalTables) || len(at) != len(lines) {
		t.Fatalf("script places %d tables in %d lines, want each of %d (all but the local ones) once:\n%s", len(at), len(lines), len(tables)-len(store.LocalTables), script)
	}
	first := len(store.ReferenceTables) + len(store.LaneTables)
	if want := "SELECT create_distributed_table('ff_flow', 'partition_key', colocate_with => 'none');"; lines[first] != want {
		t.Fatalf("first distributed line %q, want %q", lines[first], want)
	}
	for _, d := range tables {
		switch d.Kind {
		case "reference":
			if at[d.Table] >= len(store.ReferenceTables) {
				t.Errorf("reference table %s placed on line %d, after a distributed one", d.Table, at[d.Table])
			}
		case "lane":
			// The first lane table in a group of its own, one shard; the
			// others beside it.
			want := "SELECT create_distributed_table('" + d.Table + "', 'lane', colocate_with => 'none', shard_count => 1);"
			if d.Table != store.LaneTables[0] {
				want = "SELECT create_distributed_table('" + d.Table + "', 'lane', colocate_with => '" + store.LaneTables[0] + "');"
			}
			if at[d.Table] >= first || at[d.Table] < at[store.LaneTables[0]] || lines[at[d.Table]] != want {
				t.Errorf("table %s placed on line %d as %q; want %q after %s, before the tables distributed by partition_key",
					d.Table, at[d.Table], lines[at[d.Table]], want, store.LaneTables[0])
			}
		case "distributed":
			if d.Table != "ff_flow" && !strings.Contains(lines[at[d.Table]], "colocate_with => 'ff_flow'") {
				t.Errorf("%s not co-located with ff_flow: %s", d.Table, lines[at[d.Table]])
			}
			for _, r := range d.References {
				if r != d.Table && at[r] >= at[d.Table] {
					t.Errorf("%s (line %d) placed before %s (line %d), which it references", d.Table, at[d.Table], r, at[r])
				}
			}
		}
	}
}

// A keyed row off its key's partition is refused before it is written:
// there the key's unique index could not see the key's other holders.
func TestInsertRefusesAKeyOffItsPartition(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	const ns, key = "default", "order-1"
	off := ident.NewExecutionIDIn((ident.KeyPartition(ns, key) + 1) % ident.Partitions)
	for name, r := range map[string]store.NewExecution{
		"idempotency key": {ID: off, Namespace: ns, Lane: "l", State: ffdtype.StatePending, IdempotencyKey: key},
		"unique key":      {ID: off, Namespace: ns, Lane: "l", State: ffdtype.StatePending, UniqueKey: key, UniqueWhileLive: true},
	} {
		if _, _, err := store.InsertExecution(ctx, db.Pool, r); err == nil || !strings.Contains(err.Error(), "want the key's") {
			t.Errorf("%s off its partition: %v; want a refusal", name, err)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_execution`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written (%v), want none", n, err)
	}
}

// The settings `ffd migrate distribution` prints set the database's
// sessions to one connection per node for a read across the shards: a
// session that starts after them has the setting (on one Postgres a
// placeholder, which the statement's form does not mind).
func TestCitusSettings(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	if _, err := db.Pool.Exec(ctx, store.CitusSettings); err != nil {
		t.Fatalf("%s: %v", store.CitusSettings, err)
	}
	conn, err := pgx.ConnectConfig(ctx, db.Pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, `SELECT current_setting('citus.max_adaptive_executor_pool_size', true)`).Scan(&got); err != nil || got != "1" {
		t.Fatalf("a new session's citus.max_adaptive_executor_pool_size = %q (%v), want 1", got, err)
	}
}
