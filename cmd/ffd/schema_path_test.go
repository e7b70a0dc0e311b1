package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	ffd "github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

// ffd lives in the schema the connection's search_path names, not only
// in public: `ffd migrate up` with ?search_path=ffd_app creates every
// table there and none in public, and a daemon, a worker and a client on
// that URL run a flow to its end. A search_path naming no schema is
// refused with what to do.
func TestFfdLivesInTheSearchPathSchema(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	url := db.URL + sep + "search_path=ffd_app"

	code, _, errOut := runFFD(t, "migrate", "up", "--database-url="+url)
	if code == 0 || !strings.Contains(errOut, "CREATE SCHEMA ffd_app") {
		t.Fatalf("migrate up into a missing schema: exit %d, %q; want a refusal saying to create it", code, errOut)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE SCHEMA ffd_app`); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runFFD(t, "migrate", "up", "--database-url="+url); code != 0 {
		t.Fatalf("migrate up: exit %d, %s", code, errOut)
	}
	count := func(schema string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $1 AND c.relname LIKE 'ff\_%'`, schema).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if pub, app := count("public"), count("ffd_app"); pub != 0 || app < 20 {
		t.Fatalf("after migrate: %d ff_ relations in public, %d in ffd_app; want none in public", pub, app)
	}

	pool, err := ffd.NewPool(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ffd.NewDaemon(pool, &ffd.DaemonConfig{SweepInterval: 200 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer d.Stop(context.Background())
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"app"}, PollInterval: 50 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return []byte(`{}`), nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer w.Stop(context.Background())
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "app"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "app"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		fl, err := client.DescribeFlow(ctx, sub.Flow.ID)
		if err != nil {
			t.Fatal(err)
		}
		if fl.State == ffd.FlowCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flow is %s after a minute, want completed", fl.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code, out, errOut := runFFD(t, "flow", "show", sub.Flow.ID.String(), "--database-url="+url); code != 0 || !strings.Contains(out, "completed") {
		t.Fatalf("ffd flow show: exit %d, %q %q", code, out, errOut)
	}
}
