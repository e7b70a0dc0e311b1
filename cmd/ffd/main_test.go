package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func runFFD(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, append(args, "--log-format", "json"), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	url := "--database-url=" + db.URL

	code, out, errOut := runFFD(t, "migrate", "status", url)
	if code != 0 || !strings.Contains(out, "current version: 0") || !strings.Contains(out, "pending") || !strings.Contains(out, "SQL API:         missing") {
		t.Fatalf("status on empty database: code %d, out %q, err %q", code, out, errOut)
	}
	for range 2 {
		code, out, errOut = runFFD(t, "migrate", "up", url)
		if code != 0 || !strings.Contains(out, "schema at version") {
			t.Fatalf("migrate up: code %d, out %q, err %q", code, out, errOut)
		}
	}
	code, out, _ = runFFD(t, "migrate", "status", url)
	if code != 0 || !strings.Contains(out, "up to date") || !strings.Contains(out, "SQL API:         this binary's") {
		t.Fatalf("status after up: code %d, out %q", code, out)
	}

	// The migrated schema places every table; a key that omits
	// partition_key is refused by name.
	code, out, errOut = runFFD(t, "migrate", "distribution", url)
	if code != 0 || !strings.Contains(out, "SELECT create_distributed_table('ff_execution', 'partition_key', colocate_with => 'ff_flow');") ||
		!strings.Contains(out, "SELECT create_reference_table('ff_lane');") || !strings.Contains(out, store.CitusSettings) {
		t.Fatalf("migrate distribution: code %d, out %q, err %q", code, out, errOut)
	}
	if _, err := db.Pool.Exec(context.Background(), `CREATE UNIQUE INDEX ff_execution_lane_kind ON ff_execution (lane, kind) WHERE kind = 'never'`); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runFFD(t, "migrate", "distribution", url)
	if code == 0 || !strings.Contains(out, "ff_execution_lane_kind") || !strings.Contains(errOut, "cannot be distributed") {
		t.Fatalf("migrate distribution with a global unique index: code %d, out %q, err %q; want a refusal naming it", code, out, errOut)
	}

	// A database from a newer ffd is refused by name of both versions.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO `+schema.LedgerTable+` (version_id, is_applied) VALUES (9999, true)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"migrate", "status"}, {"migrate", "up"}} {
		code, _, errOut = runFFD(t, append(cmd, url)...)
		if code == 0 || !strings.Contains(errOut, "9999") || !strings.Contains(errOut, "upgrade ffd") {
			t.Fatalf("%v on a newer schema: code %d, stderr %q; want a refusal naming version 9999", cmd, code, errOut)
		}
	}
}

func TestMissingDatabaseURL(t *testing.T) {
	t.Setenv("FFD_DATABASE_URL", "")
	code, _, errOut := runFFD(t, "migrate", "status")
	if code == 0 || !strings.Contains(errOut, "FFD_DATABASE_URL") || !strings.Contains(errOut, "--database-url") {
		t.Fatalf("migrate status without a database: code %d, stderr %q", code, errOut)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"migrate", "up", "--log-level", "loud"}, {"nope"}, {"dev", "--port", "70000"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if code == 0 {
			t.Errorf("ffd %v succeeded, want an error", args)
		}
	}
}

// ffd dev starts a private server, migrates it, prints its URL, and stops
// it on cancel; a second start reuses the data directory.
func TestDev(t *testing.T) {
	t.Parallel()
	if os.Getenv(testdb.EnvURL) != "" {
		t.Skip("ffd dev runs a private server; this run uses an external one")
	}
	root := testdb.ServerDir(t)
	dataDir := filepath.Join(root, "pg")
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		var logs bytes.Buffer
		go func() {
			done <- run(ctx, []string{"dev", "--data-dir", dataDir, "--port", "0", "--admin-addr", "", "--log-format", "json"}, pw, &logs)
			pw.Close()
		}()
		var url string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "FFD_DATABASE_URL="); ok {
				url = u
				break
			}
		}
		go io.Copy(io.Discard, pr)
		if url == "" {
			cancel()
			code := <-done
			t.Fatalf("round %d: ffd dev printed no URL (exit %d): %s", round, code, logs.String())
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			cancel()
			t.Fatalf("round %d: connect to %s: %v", round, url, err)
		}
		var v int64
		err = conn.QueryRow(ctx, `SELECT max(version_id) FROM `+schema.LedgerTable).Scan(&v)
		conn.Close(ctx)
		if err != nil || v != schema.Latest() {
			cancel()
			t.Fatalf("round %d: schema version %d (%v), want %d", round, v, err, schema.Latest())
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("round %d: ffd dev exited %d after cancel, want 0: %s", round, code, logs.String())
		}
		if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); !os.IsNotExist(err) {
			t.Fatalf("round %d: server still running after ffd dev returned", round)
		}
	}
}

// ffd demo, non-interactively: JSON report, exit 0, every step as designed.
func TestDemo(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	code, out, errOut := runFFD(t, "demo", "--json", "--database-url", db.URL, "--log-level", "warn")
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, out, errOut)
	}
	var rep demoReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("demo --json printed %q: %v", out, err)
	}
	if !rep.OK || len(rep.Executions) != len(demoDAG) || rep.FlowState != "failed" {
		t.Fatalf("demo report: %+v", rep)
	}
	for _, r := range rep.Executions {
		if r.State != r.Expected || !r.AsExpected || r.Why == "" {
			t.Errorf("%s: %s, want %s (as expected: %v, why: %q)", r.Ref, r.State, r.Expected, r.AsExpected, r.Why)
		}
	}
	// The steps' events only: the flow's own failure is its state.
	if c := rep.Outbox["completion"]; c["skipped"] != 2 || c["cancelled"] != 2 || c["failed"] != 1 || rep.Outbox["lease"]["revoked"] != 2 {
		t.Fatalf("outbox counts %v", rep.Outbox)
	}
}

// A demo that runs out of --timeout (a busy machine) says which step did
// and names the flag, not a bare "context deadline exceeded".
func TestDemoNamesItsBudget(t *testing.T) {
	t.Parallel()
	// A server that accepts connections and never answers: the demo
	// waits for it until its budget runs out, however fast the machine.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan []net.Conn, 1)
	go func() {
		var held []net.Conn
		defer func() { accepted <- held }()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		for _, c := range <-accepted {
			c.Close()
		}
	})
	url := "postgres://ffd@" + l.Addr().String() + "/ffd?sslmode=disable"
	code, _, errOut := runFFD(t, "demo", "--timeout", "1s", "--database-url", url, "--log-level", "warn")
	if code == 0 {
		t.Fatal("a demo against a server that never answers exited 0")
	}
	if !strings.Contains(errOut, "took longer than 1s (--timeout") {
		t.Fatalf("a demo out of time said %q; want the step and the --timeout budget named", errOut)
	}
}

// The demo as the README runs it: the report names each step and what
// was expected of it, labels the designed failure, and logs nothing.
func TestDemoReportReads(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	code, out, errOut := runFFD(t, "demo", "--database-url", db.URL)
	if code != 0 {
		t.Fatalf("demo exited %d: %s\n%s", code, out, errOut)
	}
	for _, want := range []string{"STEP", "EXPECTED", "WHY", "fails on purpose", "failed in", "as designed", "every step ended as the DAG implies"} {
		if !strings.Contains(out, want) {
			t.Errorf("demo report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " NO ") {
		t.Errorf("a step did not end as expected:\n%s", out)
	}
	if errOut != "" {
		t.Errorf("demo logged at its default level:\n%s", errOut)
	}
}

// flow show says why each step is where it is: a failed step's error, a
// blocked one's upstreams, a waiting one's signal, a due one's lane, a
// cancelled one's reason.
func TestFlowShowSaysWhy(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	client := quietClient(t, db)
	p := func(lane string) ffd.CreateParams { return ffd.CreateParams{Lane: lane, MaxAttempts: 1} }
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "fetch", Params: p("why.a")}, {Ref: "load", Params: p("why.a")}, {Ref: "approve", Params: p("why.c")},
			{Ref: "notify", Params: p("why.d")}, {Ref: "report", Params: p("why.e")}},
		Edges: []ffd.SubmitEdge{{From: "fetch", To: "load"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(lane string) *ffd.Execution {
		xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim in %s: %v %v", lane, xs, err)
		}
		return xs[0]
	}
	x := claim("why.a")
	if _, err := client.Fail(ctx, x.ID, x.LeaseEpoch, ffd.FailParams{Error: "upstream API said 503"}); err != nil {
		t.Fatal(err)
	}
	x = claim("why.c")
	if _, err := client.Suspend(ctx, x.ID, x.LeaseEpoch, ffd.SuspendParams{Signal: "approved"}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Cancel(ctx, sub.Executions["notify"].ID, "not needed today", "ops"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runFFD(t, "flow", "show", sub.Flow.ID.String(), "--database-url="+db.URL)
	if code != 0 || !strings.Contains(out, "WHY") {
		t.Fatalf("flow show: %d %q %q", code, out, errOut)
	}
	for step, want := range map[string]string{
		"fetch":   "error: upstream API said 503",
		"load":    "waits for upstream fetch",
		"approve": "waits for signal approved",
		"notify":  "cancelled: not needed today (by ops)",
		"report":  "due: waits for a worker of lane why.e",
	} {
		if !regexp.MustCompile(`(?m)^` + step + `\s.*` + regexp.QuoteMeta(want)).MatchString(out) {
			t.Errorf("flow show's line of %s does not say %q:\n%s", step, want, out)
		}
	}
	code, out, _ = runFFD(t, "flow", "show", sub.Flow.ID.String(), "--json", "--database-url="+db.URL)
	if code != 0 || !strings.Contains(out, `"why": "waits for upstream fetch"`) {
		t.Fatalf("flow show --json: %d; want each member's why:\n%s", code, out)
	}
}

// The ops commands read and cancel executions and flows, as tables and as
// JSON; bad ids are refused with the input quoted.
func TestOpsCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client, err := ffd.NewClient(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Flow:  ffd.CreateFlowParams{Kind: "ops"},
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "ops"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "ops"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	a := sub.Executions["a"].ID.String()
	code, out, errOut := runFFD(t, "exec", "show", a, url)
	if code != 0 || !strings.Contains(out, "pending") || !strings.Contains(out, a) {
		t.Fatalf("exec show: %d %q %q", code, out, errOut)
	}
	code, out, _ = runFFD(t, "exec", "list", "--lane", "ops", "--json", url)
	var list struct {
		Executions []map[string]any `json:"executions"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list.Executions) != 2 {
		t.Fatalf("exec list --json: %d %q", code, out)
	}
	code, out, _ = runFFD(t, "flow", "show", sub.Flow.ID.String(), url)
	if code != 0 || !strings.Contains(out, "all_of") || !strings.Contains(out, "blocked") {
		t.Fatalf("flow show: %d %q", code, out)
	}
	code, out, _ = runFFD(t, "flow", "list", "--json", url)
	if code != 0 || !strings.Contains(out, sub.Flow.ID.String()) {
		t.Fatalf("flow list: %d %q", code, out)
	}
	code, out, _ = runFFD(t, "exec", "cancel", a, "--reason", "ops test", url)
	if code != 0 || !strings.Contains(out, "cancelled") {
		t.Fatalf("exec cancel: %d %q", code, out)
	}
	code, out, _ = runFFD(t, "flow", "cancel", sub.Flow.ID.String(), "--policy", "cancel_all", "--json", url)
	var res map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res["policy"] != "cancel_all" {
		t.Fatalf("flow cancel: %d %q", code, out)
	}
	code, _, errOut = runFFD(t, "exec", "show", "{fp:300}:nope", url)
	if code == 0 || !strings.Contains(errOut, "{fp:300}:nope") {
		t.Fatalf("bad id: %d %q", code, errOut)
	}
	code, _, errOut = runFFD(t, "flow", "show", "not-a-uuid", url)
	if code == 0 || !strings.Contains(errOut, "not-a-uuid") {
		t.Fatalf("bad flow id: %d %q", code, errOut)
	}
}

// ffd run validates its settings and refuses to start with bad ones.
func TestRunValidates(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, args := range [][]string{
		{"run", "--sweep-interval", "1ms"},
		{"run", "--cascade-workers", "0"},
		{"run", "--pool-max-conns", "1"},
		{"run", "--stop-timeout", "2h"},
		{"exec", "--max-conns", "-1", "list"},
	} {
		code, _, errOut := runFFD(t, append(args, "--database-url", db.URL)...)
		if code == 0 || !strings.Contains(errOut, strings.TrimPrefix(args[1], "--")) {
			t.Errorf("ffd %v: exit %d, stderr %q; want a refusal naming the flag", args, code, errOut)
		}
	}
	code, _, errOut := runFFD(t, "run", "--database-url", "")
	if code == 0 || !strings.Contains(errOut, "FFD_DATABASE_URL") {
		t.Errorf("run without a database: %d %q", code, errOut)
	}
}

// ffd run serves until cancelled (SIGTERM) and exits 0.
func TestRunStops(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logs := &syncWriter{w: &bytes.Buffer{}}
	go func() {
		done <- run(ctx, []string{"run", "--database-url", db.URL, "--admin-addr", "", "--log-format", "json", "--stop-timeout", "5s"}, io.Discard, logs)
	}()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(logs.String(), "ffd daemon ready") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("daemon not ready: %s", logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("ffd run exited %d", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("ffd run did not stop")
	}
}

// syncWriter lets a test read logs while the command writes them.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}

// ffd events tail --follow, parsed while a flow runs: every completion
// event of the flow arrives once, as JSON with the documented fields, in
// (txid, event_id) order.
func TestEventsTailFollow(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	tailDone := make(chan int, 1)
	go func() {
		tailDone <- run(ctx, []string{"events", "tail", "--follow", "--stream", "completion", "--consumer", "tail-test",
			"--poll-interval", "100ms", "--database-url", db.URL, "--log-format", "json"}, pw, io.Discard)
		pw.Close()
	}()
	demoDone := make(chan int, 1)
	go func() {
		code, _, _ := runFFD(t, "demo", "--json", "--database-url", db.URL, "--log-level", "error")
		demoDone <- code
	}()
	type line struct {
		Stream      string `json:"stream"`
		EventID     int64  `json:"event_id"`
		TxID        uint64 `json:"txid"`
		ExecutionID string `json:"execution_id"`
		FlowID      string `json:"flow_id"`
		Outcome     string `json:"outcome"`
	}
	var got []line
	sc := bufio.NewScanner(pr)
	flowDone := false
	// Every step's event and the flow's own: (txid, event_id) order need
	// not put the flow's last.
	for len(got) < len(demoDAG)+1 && sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("tail printed %q: %v", sc.Text(), err)
		}
		if l.Stream != "completion" || l.EventID == 0 || l.TxID == 0 || l.Outcome == "" {
			t.Fatalf("incomplete event line %q", sc.Text())
		}
		got = append(got, l)
		flowDone = flowDone || (l.ExecutionID == "" && l.FlowID != "")
	}
	if code := <-demoDone; code != 0 {
		t.Fatalf("demo exited %d", code)
	}
	cancel()
	go io.Copy(io.Discard, pr)
	if code := <-tailDone; code != 0 {
		t.Fatalf("tail exited %d", code)
	}
	if !flowDone {
		t.Fatal("the flow's own completion event never came")
	}
	var want int
	if err := db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM ff_completion_event`).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if len(got) != want || want != len(demoDAG)+1 {
		t.Fatalf("tail printed %d events, the outbox has %d (want %d: every step and the flow)", len(got), want, len(demoDAG)+1)
	}
	for i := 1; i < len(got); i++ {
		a, b := got[i-1], got[i]
		if a.TxID > b.TxID || (a.TxID == b.TxID && a.EventID >= b.EventID) {
			t.Fatalf("events out of (txid, event_id) order: %+v then %+v", a, b)
		}
	}
}

// ffd events tail --wal: events committed after the slot exists arrive as
// JSON lines; drop-slot removes the slot.
func TestEventsTailWAL(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	slot := "tail_" + strings.ToLower(db.Name)
	ctx := context.Background()
	var out bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "tail", "--wal", "--slot", slot, "--follow", "--limit", "3",
			"--database-url", db.URL, "--log-format", "json"}, &syncWriter{w: &out}, io.Discard)
	}()
	deadline := time.Now().Add(time.Minute)
	for {
		var active bool
		// A slot being created is active before it is consistent; it has
		// a confirmed position once it is.
		if err := db.Pool.QueryRow(ctx, `SELECT active AND confirmed_flush_lsn IS NOT NULL FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err == nil && active {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the WAL tail never attached to its slot")
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 3 {
		if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type)
			VALUES (3, gen_random_uuid(), 1, 1, 'w', 'acquired')`); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("tail --wal exited %d", code)
		}
	case <-time.After(time.Minute):
		t.Fatal("tail --wal --limit 3 did not stop")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("tail --wal printed %d lines: %q", len(lines), out.String())
	}
	for _, l := range lines {
		var e map[string]any
		if err := json.Unmarshal([]byte(l), &e); err != nil || e["stream"] != "lease" || e["event_type"] != "acquired" {
			t.Fatalf("line %q", l)
		}
	}
	for {
		var active bool
		if err := db.Pool.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err == nil && !active {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if code, outp, errOut := runFFD(t, "events", "drop-slot", slot, "--database-url", db.URL); code != 0 {
		t.Fatalf("drop-slot: %d %s %s", code, outp, errOut)
	}
	var n int
	db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&n)
	if n != 0 {
		t.Fatal("slot still there after drop-slot")
	}
}

// flow show says when a flow is stalled for want of a daemon: in the
// table as a warning line, in JSON as the lag (and the JSON stays JSON).
func TestFlowShowWarnsWithoutADaemon(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client := quietClient(t, db)
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "stall"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "stall"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	id := sub.Flow.ID.String()
	code, out, _ := runFFD(t, "flow", "show", id, url)
	if code != 0 || strings.Contains(out, "warning") {
		t.Fatalf("flow show with nothing waiting: %d %q; want no warning", code, out)
	}
	xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: "stall", Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := client.Complete(ctx, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	// Two minutes pass without a daemon.
	if _, err := db.Pool.Exec(ctx, `UPDATE ff_completion_event SET occurred_at = occurred_at - interval '2 minutes'`); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runFFD(t, "flow", "show", id, url)
	if code != 0 || !strings.Contains(out, "warning: completion events have waited 2m") {
		t.Fatalf("flow show of a stalled flow: %d %q; want the warning", code, out)
	}
	code, out, _ = runFFD(t, "flow", "show", id, "--json", url)
	var js struct {
		Lag float64 `json:"dispatch_lag_seconds"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js.Lag < 120 {
		t.Fatalf("flow show --json of a stalled flow: %d %q; want JSON with dispatch_lag_seconds >= 120", code, out)
	}
}

// flow rerun and exec rerun: the rerun's steps say which are carried and
// which run again; a solo rerun names what it reruns.
func TestRerunCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	ctx := context.Background()
	client := quietClient(t, db)
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "good", Params: ffd.CreateParams{Lane: "rr-good"}}, {Ref: "bad", Params: ffd.CreateParams{Lane: "rr-bad", MaxAttempts: 1}}}})
	if err != nil {
		t.Fatal(err)
	}
	finish := func(lane string, ok bool) ffd.ExecutionID {
		xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim %s: %v %v", lane, xs, err)
		}
		if ok {
			_, err = client.Complete(ctx, xs[0].ID, xs[0].LeaseEpoch, []byte(`"fine"`))
		} else {
			_, err = client.Fail(ctx, xs[0].ID, xs[0].LeaseEpoch, ffd.FailParams{Error: "broken"})
		}
		if err != nil {
			t.Fatal(err)
		}
		return xs[0].ID
	}
	finish("rr-good", true)
	finish("rr-bad", false)
	code, out, errOut := runFFD(t, "flow", "rerun", sub.Flow.ID.String(), url)
	if code != 0 || !strings.Contains(out, "reruns "+sub.Flow.ID.String()) ||
		!regexp.MustCompile(`good\s+carried`).MatchString(out) || !regexp.MustCompile(`bad\s+pending`).MatchString(out) {
		t.Fatalf("flow rerun: %d %q %q; want good carried and bad pending again", code, out, errOut)
	}
	code, _, errOut = runFFD(t, "flow", "rerun", sub.Flow.ID.String(), url)
	if code == 0 || !strings.Contains(errOut, "already rerun") {
		t.Fatalf("second flow rerun: %d %q; want a refusal naming the rerun", code, errOut)
	}

	solo, err := client.Create(ctx, ffd.CreateParams{Lane: "rr-solo", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	finish("rr-solo", false)
	code, out, errOut = runFFD(t, "exec", "rerun", solo.Execution.ID.UUID.String(), "--json", url)
	var js map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &js) != nil || js["rerun_of"] != solo.Execution.ID.UUID.String() || js["state"] != "pending" {
		t.Fatalf("exec rerun by bare uuid: %d %q %q; want a pending rerun of %s", code, out, errOut, solo.Execution.ID)
	}
}

// quietClient is a client on db that logs nothing.
func quietClient(t *testing.T, db *testdb.DB) *ffd.Client {
	t.Helper()
	client, err := ffd.NewClient(db.Pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// The schedule commands: create (an execution per tick, or a flow from a
// file), list, pause, resume, delete; bad specs refused.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	code, out, errOut := runFFD(t, "schedule", "create", "digest", "--cron", "0 8 * * 1-5", "--timezone", "Europe/Paris",
		"--lane", "mail", "--kind", "digest", "--payload", `{"list":"weekly"}`, url)
	if code != 0 || !strings.Contains(out, "schedule digest created") {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	flowFile := filepath.Join(t.TempDir(), "flow.json")
	if err := os.WriteFile(flowFile, []byte(`{"Nodes":[{"Ref":"a","Params":{"Lane":"etl"}},{"Ref":"b","Params":{"Lane":"etl"}}],"Edges":[{"From":"a","To":"b"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut = runFFD(t, "schedule", "create", "etl", "--cron", "@hourly", "--flow-file", flowFile, url); code != 0 {
		t.Fatalf("create a flow schedule: %d %q %q", code, out, errOut)
	}
	if code, _, errOut = runFFD(t, "schedule", "create", "bad", "--cron", "61 * * * *", "--lane", "x", url); code == 0 || !strings.Contains(errOut, "cron") {
		t.Fatalf("a bad spec: %d %q; want a refusal naming cron", code, errOut)
	}
	// A payload that is not JSON, and a flow file with a misspelt key,
	// are refused before anything is stored.
	if code, _, errOut = runFFD(t, "schedule", "create", "badjson", "--cron", "@hourly", "--lane", "x", "--payload", `{bad`, url); code == 0 || !strings.Contains(errOut, "payload") {
		t.Fatalf("a payload that is not JSON: %d %q; want a refusal naming --payload", code, errOut)
	}
	typo := filepath.Join(t.TempDir(), "typo.json")
	if err := os.WriteFile(typo, []byte(`{"Nodes":[{"Ref":"a","Params":{"Lane":"etl"}}],"Edgez":[]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut = runFFD(t, "schedule", "create", "typo", "--cron", "@hourly", "--flow-file", typo, url); code == 0 || !strings.Contains(errOut, "Edgez") {
		t.Fatalf("a flow file with an unknown key: %d %q; want a refusal naming it", code, errOut)
	}
	code, out, _ = runFFD(t, "schedule", "list", url)
	if code != 0 || !regexp.MustCompile(`digest\s+0 8 \* \* 1-5\s+Europe/Paris\s+execution`).MatchString(out) || !strings.Contains(out, "etl") {
		t.Fatalf("list: %d %q", code, out)
	}
	if code, out, _ = runFFD(t, "schedule", "pause", "digest", url); code != 0 || !strings.Contains(out, "paused=true") {
		t.Fatalf("pause: %d %q", code, out)
	}
	if code, out, _ = runFFD(t, "schedule", "resume", "digest", url); code != 0 || !strings.Contains(out, "paused=false") {
		t.Fatalf("resume: %d %q", code, out)
	}
	if code, out, _ = runFFD(t, "schedule", "delete", "digest", url); code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("delete: %d %q", code, out)
	}
	if code, _, _ = runFFD(t, "schedule", "delete", "digest", url); code == 0 {
		t.Fatal("deleting a deleted schedule succeeded")
	}
}

// What was typed wrong exits 2 with the line naming the command's
// --help, whether kong or the command found it: JSON that does not
// parse (with where), a database URL that is none, a flow file that is
// not a flow; and `ffd daemon` is the daemon.
func TestArgumentErrorsExitTwo(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte("{\n  \"Nodes\": [\n    {\"Ref\": \"b\" \"Params\": {}}\n  ]\n}"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a malformed flow file", []string{"schedule", "create", "s", "--cron", "@hourly", "--flow-file", bad, "--database-url", "postgres://x@127.0.0.1:1/x"}, "line 3, column 17"},
		{"a malformed payload", []string{"schedule", "create", "s", "--cron", "@hourly", "--lane", "a", "--payload", "{bad", "--database-url", "postgres://x@127.0.0.1:1/x"}, "--payload is not valid JSON: line 1, column 2"},
		{"a database URL that is none", []string{"flow", "list", "--database-url", "notaurl"}, "--database-url"},
		{"an unknown command", []string{"deamon"}, "unexpected argument"},
	} {
		code, _, errOut := runFFD(t, tc.args...)
		if code != exitBadArgs || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--help'") {
			t.Errorf("%s: exit %d, %q; want exit %d saying %q and which --help to read", tc.name, code, errOut, exitBadArgs, tc.want)
		}
	}
	if code, out, _ := runFFD(t, "daemon", "--help"); code != 0 || !strings.Contains(out, "Usage: ffd run") {
		t.Errorf("ffd daemon --help: %d %q; want the help of ffd run", code, out)
	}
}

// The lane commands: pause, cap, list, resume; a negative cap refused.
func TestLaneCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	// A lane with no settings and no work: a misspelt name, unless --new.
	if code, _, errOut := runFFD(t, "lane", "pause", "emails", url); code != exitFailed || !strings.Contains(errOut, "--new") {
		t.Fatalf("pause of a lane never seen: %d %q; want exit %d naming --new", code, errOut, exitFailed)
	}
	if code, out, errOut := runFFD(t, "lane", "pause", "emails", "--new", url); code != 0 || !strings.Contains(out, "paused=true") {
		t.Fatalf("pause: %d %q %q", code, out, errOut)
	}
	if code, out, _ := runFFD(t, "lane", "limit", "reports", "4", "--new", url); code != 0 || !strings.Contains(out, "max_running=4") {
		t.Fatalf("limit: %d %q", code, out)
	}
	code, out, _ := runFFD(t, "lane", "list", url)
	if code != 0 || !regexp.MustCompile(`emails\s+true\s+-`).MatchString(out) || !regexp.MustCompile(`reports\s+false\s+4`).MatchString(out) {
		t.Fatalf("list: %d %q", code, out)
	}
	if code, _, _ := runFFD(t, "lane", "limit", "reports", "--", "-1", url); code == 0 {
		t.Fatal("a negative cap was accepted")
	}
	if code, out, _ := runFFD(t, "lane", "resume", "emails", url); code != 0 || !strings.Contains(out, "paused=false") {
		t.Fatalf("resume: %d %q", code, out)
	}
}

// The flow-control commands: a lane's rate, a key's limit and rate,
// the keys listed with what they hold back, a key forgotten; bad rates
// refused.
func TestFlowControlCommands(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	url := "--database-url=" + db.URL
	client, err := ffd.NewClient(db.Pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	ps := make([]ffd.CreateParams, 4)
	for i := range ps {
		ps[i] = ffd.CreateParams{Lane: "api", ConcurrencyKey: "acme"}
	}
	if _, err := client.CreateMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runFFD(t, "lane", "rate", "api", "600/1m", "--burst", "5", url); code != 0 || !strings.Contains(out, "rate=600/1m0s_burst_5") {
		t.Fatalf("rate: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runFFD(t, "lane", "key", "api", "acme", "--max-running", "1", "--rate", "10/s", url); code != 0 ||
		!strings.Contains(out, "max_running=1") || !strings.Contains(out, "rate=10/1s_burst_10") {
		t.Fatalf("key: %d %q %q", code, out, errOut)
	}
	if xs, err := client.Claim(context.Background(), ffd.ClaimParams{Lane: "api", Worker: "w", Max: 4}); err != nil || len(xs) != 1 {
		t.Fatalf("claim under the key's limit: %d %v; want 1", len(xs), err)
	}
	code, out, _ := runFFD(t, "lane", "keys", "api", "--held", url)
	if code != 0 || !regexp.MustCompile(`acme\s+fair\s+1\s+10/1s burst 10\s+\S+\s+1\s+1\s+3\s+true`).MatchString(out) {
		t.Fatalf("keys --held: %d %q; want acme held with 1 running and 3 due", code, out)
	}
	code, out, _ = runFFD(t, "lane", "list", "--json", url)
	var list struct {
		Lanes []map[string]any `json:"lanes"`
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || len(list.Lanes) != 1 ||
		list.Lanes[0]["keys_held"] != 1.0 || list.Lanes[0]["waiting_on_keys"] != 3.0 || list.Lanes[0]["keyed"] != true {
		t.Fatalf("list --json: %d %q %v; want api keyed, one key holding 3 back", code, out, err)
	}
	for _, bad := range [][]string{{"lane", "rate", "api", "600"}, {"lane", "rate", "api", "5/0s"}, {"lane", "key", "api", "acme", "--weight", "0"},
		{"lane", "key", "api", "acme", "--burst", "3"}, {"lane", "key", "api", "acme", "--forget", "--weight", "2"},
		{"lane", "key", "api", "acme", "--order", "sideways"}, {"lane", "key", "api", "acme", "--order", "strict", "--max-running", "2"}} {
		if code, _, _ := runFFD(t, append(bad, url)...); code == 0 {
			t.Errorf("%v was accepted", bad)
		}
	}
	if code, out, errOut := runFFD(t, "lane", "key", "api", "serial", "--order", "strict", "--new", url); code != 0 ||
		!strings.Contains(out, "order=strict") || !strings.Contains(out, "max_running=1") {
		t.Fatalf("key --order strict: %d %q %q; want a strict key of limit 1", code, out, errOut)
	}
	if code, out, errOut := runFFD(t, "lane", "key", "api", "acme", "--forget", url); code != 0 || !strings.Contains(out, "forgotten once idle") {
		t.Fatalf("forget: %d %q %q", code, out, errOut)
	}
	if code, _, _ := runFFD(t, "lane", "key", "api", "nosuch", "--forget", url); code == 0 {
		t.Fatal("forgetting a key that does not exist succeeded")
	}
}

// ffd console serves the console until interrupted: the flows page
// answers, an action without credentials is refused.
func TestConsoleCommand(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"console", "--database-url", db.URL, "--addr", addr, "--log-format", "json"}, io.Discard, io.Discard)
	}()
	var resp *http.Response
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; {
		if resp, err = http.Get("http://" + addr + "/flows"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the console never answered: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "Flows") {
		t.Fatalf("GET /flows: %d %q", resp.StatusCode, body)
	}
	if resp, err := http.PostForm("http://"+addr+"/actions/lanes/x/pause", url.Values{}); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("an action on a console without credentials: %v %v; want 403", resp, err)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("ffd console exited %d after an interrupt", code)
	}
}

// ffd run --console serves the console next to the health endpoints.
func TestRunServesTheConsole(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	addr := serveRun(t, "--console", "--database-url", db.URL)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := get("/healthz"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ffd run never answered /healthz")
		}
	}
	if code, body := get("/flows"); code != 200 || !strings.Contains(body, "ffd console") {
		t.Fatalf("GET /flows on ffd run --console: %d %q", code, body)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "ffd_events_dispatched_total") {
		t.Fatalf("/metrics no longer served beside the console: %d", code)
	}
}

// --max-conns bounds a command's pool; without it the URL's
// pool_max_conns, then pgx's default, decide.
func TestMaxConns(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	sep := "?"
	if strings.Contains(db.URL, "?") {
		sep = "&"
	}
	for _, c := range []struct {
		url  string
		flag int32
		want int32
	}{
		{db.URL, 3, 3},
		{db.URL + sep + "pool_max_conns=7", 0, 7},
		{db.URL + sep + "pool_max_conns=7", 2, 2},
	} {
		g := &Globals{DatabaseURL: c.url, MaxConns: c.flag}
		pool, err := g.pool(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := pool.Config().MaxConns
		pool.Close()
		if got != c.want {
			t.Errorf("--max-conns %d over %q: pool of %d, want %d", c.flag, c.url, got, c.want)
		}
	}
}

// Every command reports errors the same way: "ffd: <what>" on stderr,
// exit 2 for what was typed wrong (with where the flags are described),
// exit 1 for what failed.
func TestErrorsShareOnePrefixAndExitCodes(t *testing.T) {
	t.Parallel()
	nowhere := "--database-url=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"exec", "list", "--bogus"}, 2, "see 'ffd exec list --help'"},
		{[]string{"bogus"}, 2, "see 'ffd --help'"},
		{[]string{"run", "--queue-size", "0", nowhere}, 2, "--queue-size"},
		{[]string{"exec", "show", "nope", nowhere}, 2, "invalid execution_id"},
		{[]string{"flow", "show", "nope", nowhere}, 2, "invalid"},
		{[]string{"exec", "list", nowhere}, 1, "connect to database"},
		{[]string{"schedule", "list", nowhere}, 1, "connect to database"},
		{[]string{"exec", "list"}, 1, "no database configured"},
	} {
		code, _, errOut := runFFD(t, c.args...)
		if code != c.code || !strings.HasPrefix(errOut, "ffd: ") || strings.Contains(errOut, "ffd: error:") || !strings.Contains(errOut, c.want) {
			t.Errorf("ffd %s: exit %d, stderr %q; want exit %d, \"ffd: \" first, mentioning %q", strings.Join(c.args, " "), code, errOut, c.code, c.want)
		}
	}
}

// A command's help describes its own flags and names the global ones on
// a few lines, instead of describing them all again.
func TestCommandHelpNamesGlobalFlagsBriefly(t *testing.T) {
	t.Parallel()
	for _, cmd := range [][]string{{"exec", "list"}, {"schedule", "create"}, {"events", "tail"}, {"migrate", "up"}} {
		code, out, _ := runFFD(t, append(cmd, "--help")...)
		if code != 0 {
			t.Fatalf("ffd %s --help: exit %d", strings.Join(cmd, " "), code)
		}
		if strings.Contains(out, "keepalive probe") || strings.Contains(out, "idle inside a transaction") {
			t.Errorf("ffd %s --help describes the global flags again:\n%s", strings.Join(cmd, " "), out)
		}
		_, footer, ok := strings.Cut(out, "Global flags")
		if !ok || !strings.Contains(footer, "--database-url") || strings.Count(footer, "\n") > 6 {
			t.Errorf("ffd %s --help: want a short footer naming the global flags; got:\n%s", strings.Join(cmd, " "), out)
		}
	}
	// The top-level help still describes them.
	if _, out, _ := runFFD(t, "--help"); !strings.Contains(out, "idle inside a transaction") {
		t.Errorf("ffd --help no longer describes the global flags:\n%s", out)
	}
}

// ffd run --worker-api serves the worker protocol beside the console,
// to holders of a token of --worker-token-file only; without a token file
// it refuses to start.
func TestRunServesTheWorkerAPI(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# the workers' tokens\n\nworker-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, []byte("# none yet\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ args, want string }{
		{"--worker-api --admin-addr 127.0.0.1:0", "--worker-api needs --worker-token-file"},
		{"--worker-api --admin-addr 127.0.0.1:0 --worker-token-file " + empty, "no token in it"},
		{"--worker-api --admin-addr= --worker-token-file " + tokens, "--worker-api needs --admin-addr"},
	} {
		var errOut bytes.Buffer
		args := append([]string{"run", "--database-url", db.URL, "--log-format", "json"}, strings.Fields(c.args)...)
		if code := run(context.Background(), args, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), c.want) {
			t.Fatalf("ffd run %s: exit %d, %q; want a refusal saying %q", c.args, code, errOut.String(), c.want)
		}
	}
	addr := serveRun(t, "--console", "--worker-api", "--worker-token-file", tokens, "--database-url", db.URL)
	post := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+ffd.WorkerAPIPrefix+"claim", strings.NewReader(`{"lane": "w", "worker": "t/1"}`))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	const budget = 2 * time.Minute
	for deadline := time.Now().Add(budget); ; time.Sleep(50 * time.Millisecond) {
		if code, _ := post("worker-token-0123456789"); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ffd run --worker-api did not answer a claim within %s", budget)
		}
	}
	if code, body := post("worker-token-0123456789"); code != 200 || !strings.Contains(body, `"executions":[]`) {
		t.Fatalf("claim with the token: %d %s", code, body)
	}
	if code, body := post("worker-token-01234567"); code != 401 {
		t.Fatalf("claim with a wrong token: %d %s, want 401", code, body)
	}
	resp, err := http.Get("http://" + addr + "/flows")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the console beside the worker API: %v %v", resp, err)
	}
	resp.Body.Close()
	// The protocol's metrics are served with the daemon's.
	resp, err = http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`ffd_worker_api_requests_total{call="claim",status="200"}`, `ffd_worker_api_requests_total{call="claim",status="401"} 1`,
		`ffd_worker_api_request_seconds_count{call="claim"}`, `ffd_events_dispatched_total`} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// serveRun runs `ffd run` with these flags on a free loopback admin
// address until the test ends, then checks that it stopped cleanly; it
// returns the address.
func serveRun(t *testing.T, flags ...string) string {
	t.Helper()
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	args := append(append([]string{"run"}, flags...), "--admin-addr", addr, "--log-format", "json", "--stop-timeout", "5s")
	go func() { done <- run(ctx, args, io.Discard, io.Discard) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("ffd run exited %d", code)
		}
	})
	return addr
}

// freeAddr is a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
