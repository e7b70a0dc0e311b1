package main

import (
	"context"
	"io"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// deploy/roles.sql gives the daemon and the workers enough and no more:
// the daemon (ffd run) and a worker, each as its own least-privilege role,
// run a flow to its end; the runtime role cannot change the schema.
func TestLeastPrivilegeRoles(t *testing.T) {
	t.Parallel()
	// In public (the default), and in a schema of its own (ffd.schema for
	// the script, ?search_path= in every URL).
	for _, schema := range []string{"", "ffd_app"} {
		t.Run("schema="+schema, func(t *testing.T) {
			t.Parallel()
			leastPrivilegeRoles(t, schema)
		})
	}
}

func leastPrivilegeRoles(t *testing.T, schema string) {
	// In public the tables exist before the script runs (it takes them
	// over); in the schema the migrator creates them.
	db := testdb.New(t)
	if schema != "" {
		db = testdb.NewEmpty(t)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	script, err := os.ReadFile("../../deploy/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	// Roles are cluster-wide and tests share the cluster: give this test's
	// roles names of their own.
	prefix := "t" + strings.ToLower(strings.ReplaceAll(db.Name, "-", ""))
	sql := strings.ReplaceAll(string(script), "ffd_", prefix+"_")
	if schema != "" {
		if _, err := db.Pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			t.Fatal(err)
		}
		sql = "SET LOCAL ffd.schema = '" + schema + "';\n" + sql
	}
	// The catalog read in its physical order, where a serial column's
	// sequence comes before its table: the script must not depend on
	// the order the planner happens to read pg_class in.
	sql = "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_indexonlyscan = off;\n" + sql
	dbs := []*testdb.DB{db}
	if schema == "" {
		// Another database of the same cluster, whose run finds the
		// roles there already.
		dbs = append(dbs, testdb.New(t))
	}
	t.Cleanup(func() {
		for _, r := range []string{"daemon", "worker", "wal", "producer", "runtime", "migrator"} {
			for _, d := range dbs {
				d.Pool.Exec(context.Background(), `DROP OWNED BY `+prefix+`_`+r) //nolint:errcheck
			}
			db.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+prefix+`_`+r) //nolint:errcheck
		}
	})
	// Twice on each database: a second run is harmless.
	for _, d := range dbs {
		for run := 1; run <= 2; run++ {
			if _, err := d.Pool.Exec(ctx, sql); err != nil {
				t.Fatalf("deploy/roles.sql, run %d on %s: %v", run, d.Name, err)
			}
		}
	}
	for _, d := range dbs[1:] {
		var notOwned int
		if err := d.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname LIKE 'ff\_%' AND c.relkind IN ('r', 'S')
				AND pg_get_userbyid(c.relowner) <> $1`, prefix+"_migrator").Scan(&notOwned); err != nil {
			t.Fatal(err)
		}
		if notOwned != 0 {
			t.Fatalf("on the second database %d ff_ tables and sequences are not the migrator's", notOwned)
		}
	}
	as := func(role string) string {
		u, _ := url.Parse(db.URL)
		u.User = url.User(prefix + "_" + role)
		if schema != "" {
			q := u.Query()
			q.Set("search_path", schema)
			u.RawQuery = q.Encode()
		}
		return u.String()
	}
	if code, out, errOut := runFFD(t, "migrate", "up", "--database-url", as("migrator")); code != 0 {
		t.Fatalf("migrate up as the migrator: %d %s %s", code, out, errOut)
	}

	dctx, stopDaemon := context.WithCancel(ctx)
	daemonDone := make(chan int, 1)
	go func() {
		daemonDone <- run(dctx, []string{"run", "--database-url", as("daemon"), "--admin-addr", "", "--log-format", "json",
			"--sweep-interval", "200ms", "--stop-timeout", "5s"}, io.Discard, io.Discard)
	}()
	defer func() {
		stopDaemon()
		if code := <-daemonDone; code != 0 {
			t.Errorf("the daemon as its role exited %d", code)
		}
	}()

	pool, err := ffd.NewPool(ctx, as("worker"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"roles"}, PollInterval: 50 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return []byte(`"ok"`), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background()) //nolint:errcheck
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "roles"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "roles"}},
			{Ref: "c", Params: ffd.CreateParams{Lane: "roles"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}, {From: "a", To: "c"}},
	})
	if err != nil {
		t.Fatalf("submit as the worker role: %v", err)
	}
	for {
		f, err := client.DescribeFlow(ctx, sub.Flow.ID)
		if err != nil {
			t.Fatal(err)
		}
		if f.State == ffd.FlowCompleted {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("flow still %s: the daemon or the worker lacks a privilege", f.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	producerMayOnlyExecute(ctx, t, as("producer"), client)
	// The daemon refreshes planner statistics through a function that
	// runs as the tables' owner: the runtime roles may call it.
	if _, err := store.RefreshStaleStatistics(ctx, pool, 1000, 4); err != nil {
		t.Fatalf("refresh statistics as the worker role: %v", err)
	}
	// And no more than that: the runtime roles cannot alter the schema.
	if _, err := pool.Exec(ctx, `ALTER TABLE ff_execution ADD COLUMN sneaky int`); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("the worker role altered a table: %v", err)
	}
	// The flow completes when its last member does; that member's own
	// event is dispatched a moment later. Quiet means once it is.
	admin := db.Pool
	if schema != "" {
		u, _ := url.Parse(db.URL)
		q := u.Query()
		q.Set("search_path", schema)
		u.RawQuery = q.Encode()
		if admin, err = pgxpool.New(ctx, u.String()); err != nil {
			t.Fatal(err)
		}
		defer admin.Close()
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = 'public' AND c.relname LIKE 'ff\_%'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%d ff_ relations in public (%v), want none", n, err)
		}
	}
	for {
		err := store.CheckQuiescent(ctx, admin)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// producerMayOnlyExecute: the producer role submits a flow through the
// SQL API, which runs to its end, and can touch no table itself.
func producerMayOnlyExecute(ctx context.Context, t *testing.T, url string, client *ffd.Client) {
	t.Helper()
	producer, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer producer.Close()
	var fid string
	if err := producer.QueryRow(ctx, `SELECT ffd_submit_flow('{"nodes": [{"ref": "a", "lane": "roles"}, {"ref": "b", "lane": "roles"}], "edges": [{"from": "a", "to": "b"}]}')->>'flow_id'`).Scan(&fid); err != nil {
		t.Fatalf("submit through SQL as the producer role: %v", err)
	}
	for _, sql := range []string{
		`SELECT count(*) FROM ff_execution`,
		`UPDATE ff_flow SET state = 'completed'`,
		`INSERT INTO ff_event (partition_key, event_id, namespace, name, event_key) VALUES (0, gen_random_uuid(), 'd', 'e', 'k')`,
	} {
		if _, err := producer.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Fatalf("the producer role ran %q: %v; want permission denied", sql, err)
		}
	}
	for {
		var state string
		if err := producer.QueryRow(ctx, `SELECT ffd_flow($1)->>'state'`, fid).Scan(&state); err != nil {
			t.Fatal(err)
		}
		if state == "completed" {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("the producer's flow is still %s", state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
