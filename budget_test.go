package ffd_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The write budget: what one execution costs Postgres, counted exactly
// (never timed). Rows are pg_stat_user_tables' inserts and updates on the
// ff_* tables, read once every backend that wrote them has exited (a
// backend flushes its statistics before it leaves pg_stat_activity).
// Statements and round trips are counted by a pgx tracer.
//
// A change that adds to any of these changes the budget here, in the same
// commit, and says why; a change that removes one lowers it (the counts
// are compared exactly, so the budget cannot silently go slack).
// docs/benchmarks.md ("The write budget") explains each entry.
var (
	// A solo execution that succeeds on its first attempt: the claim
	// updates the execution; the completion updates it again and inserts
	// its completion event. Attempt rows and lease events are written only
	// for what a consumer cannot read from the execution row: an attempt
	// that ended with a retry, a lease revoked or expired.
	budgetSoloRows = map[string]int{
		"ff_execution.upd":        2,
		"ff_completion_event.ins": 1,
	}
	// The claim (the setting that puts it on its generic plan, and the
	// claim: one pipelined batch) and the completion (the setting that
	// puts the ending on its generic plan, the ending, which also locks
	// the flows of what it ended, and the flow-finishing statement, one
	// pipelined batch): two round trips. The claim's setting costs no
	// planning and saves the claim's (0.3-0.5 ms a call;
	// docs/benchmarks.md); the ending's keeps the plan that updates the
	// rows in the lock order without locking them first
	// (store.terminateHeldSQL: 10-15% of the ending). The completion's
	// batch also carries its notification (migration 00024: the writer
	// notifies, not a trigger), one statement more and no round trip.
	budgetSoloStatements = 6
	budgetSoloRoundTrips = 2
	// Notifications: none for the claim; one for the completion (a
	// bare wake-up on ff_completion for the outbox's consumers), sent by
	// its transaction, so one per committing transaction however many it
	// ends.
	budgetSoloClaimNotifies    = 0
	budgetSoloCompleteNotifies = 1

	// One all_of hop in a flow, a → b: a's completion (its row, its
	// completion event), then the daemon's dispatch of that event (marks it
	// dispatched, resolves the edge, counts it on b's group, records the
	// group's decision, and makes b pending). The claim of b is not part
	// of the hop. The group is written twice: the counters move in SQL, the
	// policy decides in Go (internal/flows) and the decision is written
	// back in the same transaction.
	// The member's completion: the solo one's pipelined batch (the
	// ending's plan setting, the ending with its flow's lock, the
	// flow-finishing statement and the notification). The dispatch of its event, one event per
	// transaction: BEGIN, take the event, lock the group and resolve the
	// edge and count it (reading b's lane; one pipelined batch of two),
	// record the decision, make b pending and tell b's lane, and let the
	// commit skip waiting for the WAL flush (one pipelined batch of four:
	// the last is a set_config, store.DecisionEffects.Unflushed says why
	// it is safe; it takes the disk's flush, 0.1 to 2.4 ms on the
	// machines measured, out of every hop), COMMIT. The daemon takes every
	// event a notification names in one such transaction, so under load
	// these are shared by many hops.
	budgetHopCompleteStatements, budgetHopCompleteRoundTrips = 4, 1
	budgetHopDispatchStatements, budgetHopDispatchRoundTrips = 9, 5
	// Notifications: the member's completion names its partition on
	// ff_completion (for the daemon); the dispatch tells b's lane on
	// ff_ready that b is due.
	budgetHopCompleteNotifies, budgetHopDispatchNotifies = 1, 1

	budgetHopRows = map[string]int{
		"ff_execution.upd":        2,
		"ff_completion_event.ins": 1,
		"ff_completion_event.upd": 1,
		"ff_edge.upd":             1,
		"ff_edge_group.upd":       2,
	}
)

// writeCounter reads the ff_* tables' write counters.
type writeCounter struct {
	t    *testing.T
	ctx  context.Context
	conn *pgx.Conn
}

func newWriteCounter(t *testing.T, ctx context.Context, url string) *writeCounter {
	t.Helper()
	var v int
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v < 150000 {
		// Before 15 statistics travel over UDP to a collector, with no
		// way to wait for them: the counts could not be exact.
		t.Skipf("the write budget needs PostgreSQL 15 or newer (statistics in shared memory); server is %d", v)
	}
	return &writeCounter{t: t, ctx: ctx, conn: conn}
}

// read waits until no other client backend is connected to the database
// (so every writer has flushed its statistics; a notifyCounter, which
// writes nothing, may stay), then returns each ff_*
// table's inserts, updates and deletes, keyed "table.ins" and so on.
func (w *writeCounter) read() map[string]int {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var others int
		if err := w.conn.QueryRow(w.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'
				AND application_name <> $1`, notifyCounterApp).Scan(&others); err != nil {
			w.t.Fatal(err)
		}
		if others == 0 {
			break
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("%d other backends still connected after 30 s", others)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Our own backend's counts (it writes nothing, but reads the views)
	// and a fresh snapshot of everyone's.
	if _, err := w.conn.Exec(w.ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		w.t.Fatal(err)
	}
	if _, err := w.conn.Exec(w.ctx, `SELECT pg_stat_clear_snapshot()`); err != nil {
		w.t.Fatal(err)
	}
	rows, err := w.conn.Query(w.ctx, `SELECT relname, n_tup_ins, n_tup_upd, n_tup_del
		FROM pg_stat_user_tables WHERE relname LIKE 'ff\_%' AND relname <> 'ff_schema_version'`)
	if err != nil {
		w.t.Fatal(err)
	}
	out := map[string]int{}
	for rows.Next() {
		var name string
		var ins, upd, del int
		if err := rows.Scan(&name, &ins, &upd, &del); err != nil {
			w.t.Fatal(err)
		}
		for k, v := range map[string]int{"ins": ins, "upd": upd, "del": del} {
			if v != 0 {
				out[name+"."+k] = v
			}
		}
	}
	if err := rows.Err(); err != nil {
		w.t.Fatal(err)
	}
	return out
}

// perExecution is after − before divided by n, refusing a remainder (the
// counts are exact).
func perExecution(t *testing.T, before, after map[string]int, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for k, v := range after {
		d := v - before[k]
		if d == 0 {
			continue
		}
		if d%n != 0 {
			t.Errorf("%s: %d writes for %d executions is not a whole number per execution", k, d, n)
		}
		out[k] = d / n
	}
	return out
}

func formatWrites(m map[string]int) string {
	keys := make([]string, 0, len(m))
	total := 0
	for k, v := range m {
		keys = append(keys, k)
		if !strings.HasSuffix(k, ".del") {
			total += v
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%d ", k, m[k])
	}
	fmt.Fprintf(&b, "(%d row writes)", total)
	return b.String()
}

func checkWrites(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if formatWrites(got) != formatWrites(want) {
		t.Errorf("%s writes per execution:\n got %s\nwant %s (the budget)", what, formatWrites(got), formatWrites(want))
	}
}

// statementCounter counts what a pool sends: statements, and round trips
// (a batch is one).
type statementCounter struct {
	statements, roundTrips atomic.Int64
}

func (s *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.statements.Add(1)
	s.roundTrips.Add(1)
	return ctx
}
func (s *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.roundTrips.Add(1)
	return ctx
}
func (s *statementCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	s.statements.Add(1)
}
func (s *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// notifyCounter counts the notifications the server delivers on ffd's
// channels: a connection of its own LISTENs on every one of them.
type notifyCounter struct {
	t      *testing.T
	conn   *pgx.Conn
	marker int
}

// notifyMarker is the counter's own channel: a notification it sends
// there arrives after every one committed before it (Postgres delivers
// them in commit order), so reading up to it reads all of those.
const notifyMarker = "ff_budget_marker"

// notifyCounterApp names the counter's connection, which the write
// counter does not wait for.
const notifyCounterApp = "ffd-budget-notifies"

func newNotifyCounter(t *testing.T, ctx context.Context, url string) *notifyCounter {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = notifyCounterApp
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, ch := range append(slices.Clone(store.Channels), notifyMarker) {
		if _, err := conn.Exec(ctx, "LISTEN "+ch); err != nil {
			t.Fatal(err)
		}
	}
	return &notifyCounter{t: t, conn: conn}
}

// take returns the notifications delivered since the last take, by
// channel.
func (n *notifyCounter) take(ctx context.Context) map[string]int {
	n.t.Helper()
	n.marker++
	payload := strconv.Itoa(n.marker)
	if _, err := n.conn.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyMarker, payload); err != nil {
		n.t.Fatal(err)
	}
	out := map[string]int{}
	for {
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		note, err := n.conn.WaitForNotification(wctx)
		cancel()
		if err != nil {
			n.t.Fatalf("waiting up to 30 s for the counter's own notification %s: %v", payload, err)
		}
		if note.Channel == notifyMarker {
			if note.Payload == payload {
				return out
			}
			continue
		}
		out[note.Channel]++
	}
}

// checkNotifies compares what take counted with want notifications for
// each of n calls, in total over ffd's channels.
func checkNotifies(t *testing.T, what string, got map[string]int, n, want int) {
	t.Helper()
	total := 0
	for _, v := range got {
		total += v
	}
	if total != n*want {
		t.Errorf("%s: %d notifications for %d (%v), want %d each (the budget)", what, total, n, got, want)
	}
}

// budgetSetup gives a test a database whose own pool is closed at once
// (so that nothing of the harness writes during a measurement), a write
// counter, and a client over a pool of the test's own, traced.
func budgetSetup(t *testing.T) (context.Context, *testdb.DB, *writeCounter) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db := testdb.New(t)
	db.Pool.Close()
	return ctx, db, newWriteCounter(t, ctx, db.URL)
}

func budgetPool(t *testing.T, ctx context.Context, url string, tracer pgx.QueryTracer, maxConns int32) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	if tracer != nil {
		cfg.ConnConfig.Tracer = tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func budgetClient(t *testing.T, pool *pgxpool.Pool) *ffd.Client {
	t.Helper()
	c, err := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop(), StallWarning: -1})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// warmDistributed asks store.Distributed once on the pool and once in a
// transaction of its connection, which it caches, so that what a test
// counts afterwards holds no such question.
func warmDistributed(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := store.Distributed(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := store.Distributed(ctx, tx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// checkInvariants proves the store's invariants over what the test wrote.
func checkInvariants(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := store.CheckInvariants(ctx, conn); err != nil {
		t.Error(err)
	}
}

// TestWriteBudgetSolo: claim → complete of solo executions, one at a time
// through the Client (statements and round trips are exact only so), and
// the same through a Worker at concurrency (rows do not depend on how
// claims and completions are batched).
func TestWriteBudgetSolo(t *testing.T) {
	t.Parallel()
	ctx, db, wc := budgetSetup(t)
	const n = 50
	setupPool := budgetPool(t, ctx, db.URL, nil, 4)
	creator := budgetClient(t, setupPool)
	for range 2 * n {
		if _, err := creator.Create(ctx, ffd.CreateParams{Lane: "budget", Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	setupPool.Close()
	before := wc.read()

	var tracer statementCounter
	pool := budgetPool(t, ctx, db.URL, &tracer, 1)
	c := budgetClient(t, pool)
	// Once per pool, not per execution: whether the tables are
	// distributed (store.Distributed), read by the first claim.
	if _, err := store.Distributed(ctx, pool); err != nil {
		t.Fatal(err)
	}
	notes := newNotifyCounter(t, ctx, db.URL)
	tracer.statements.Store(0)
	tracer.roundTrips.Store(0)
	var claimed []*ffd.Execution
	for i := range n {
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: "budget", Worker: "budget/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim %d: %v (%d claimed)", i, err, len(xs))
		}
		claimed = append(claimed, xs[0])
	}
	checkNotifies(t, "solo claims", notes.take(ctx), n, budgetSoloClaimNotifies)
	for i, x := range claimed {
		if _, err := c.Complete(ctx, x.ID, x.LeaseEpoch, []byte(`{}`)); err != nil {
			t.Fatalf("complete %d: %v", i, err)
		}
	}
	checkNotifies(t, "solo completions", notes.take(ctx), n, budgetSoloCompleteNotifies)
	statements, roundTrips := tracer.statements.Load(), tracer.roundTrips.Load()
	pool.Close()
	after := wc.read()
	checkWrites(t, "solo (client)", perExecution(t, before, after, n), budgetSoloRows)
	if statements != int64(budgetSoloStatements*n) || roundTrips != int64(budgetSoloRoundTrips*n) {
		t.Errorf("solo claim → complete: %d statements and %d round trips for %d executions, want %d and %d per execution (the budget)",
			statements, roundTrips, n, budgetSoloStatements, budgetSoloRoundTrips)
	}

	// The same through a Worker, at concurrency, with its group commit.
	pool = budgetPool(t, ctx, db.URL, nil, 8)
	c = budgetClient(t, pool)
	runWorkerUntil(t, c, ctx, "budget", n, 10)
	pool.Close()
	final := wc.read()
	checkWrites(t, "solo (worker)", perExecution(t, after, final, n), budgetSoloRows)
	checkInvariants(t, ctx, db.URL)
}

// TestWriteBudgetHop: the completion of a flow member and the daemon's
// dispatch of its event, up to the downstream being claimable.
func TestWriteBudgetHop(t *testing.T) {
	t.Parallel()
	ctx, db, wc := budgetSetup(t)
	const n = 20
	setupPool := budgetPool(t, ctx, db.URL, nil, 4)
	creator := budgetClient(t, setupPool)
	var claimed []*ffd.Execution
	for range n {
		if _, err := creator.SubmitFlow(ctx, ffd.SubmitFlowParams{
			Nodes: []ffd.SubmitNode{
				{Ref: "a", Params: ffd.CreateParams{Lane: "hop-a"}},
				{Ref: "b", Params: ffd.CreateParams{Lane: "hop-b"}},
			},
			Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	xs, err := creator.Claim(ctx, ffd.ClaimParams{Lane: "hop-a", Worker: "budget/1", Max: n})
	if err != nil || len(xs) != n {
		t.Fatalf("claim: %v (%d of %d)", err, len(xs), n)
	}
	claimed = xs
	setupPool.Close()
	before := wc.read()

	var tracer statementCounter
	pool := budgetPool(t, ctx, db.URL, &tracer, 1)
	c := budgetClient(t, pool)
	// Once per pool and per connection (the dispatch's statements ask
	// in its transaction), not per hop.
	warmDistributed(t, ctx, pool)
	notes := newNotifyCounter(t, ctx, db.URL)
	tracer.statements.Store(0)
	tracer.roundTrips.Store(0)
	for _, x := range claimed {
		if _, err := c.Complete(ctx, x.ID, x.LeaseEpoch, nil); err != nil {
			t.Fatal(err)
		}
	}
	checkNotifies(t, "a flow member's completion", notes.take(ctx), n, budgetHopCompleteNotifies)
	if s, r := tracer.statements.Load(), tracer.roundTrips.Load(); s != int64(budgetHopCompleteStatements*n) || r != int64(budgetHopCompleteRoundTrips*n) {
		t.Errorf("a flow member's completion: %d statements and %d round trips for %d, want %d and %d each (the budget)",
			s, r, n, budgetHopCompleteStatements, budgetHopCompleteRoundTrips)
	}
	tracer.statements.Store(0)
	tracer.roundTrips.Store(0)
	d := cascade.New(pool, nil)
	for dispatched := 0; dispatched < n; {
		res, err := d.DispatchBatch(ctx, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if res.Events == 0 {
			t.Fatalf("%d of %d events dispatched, then none left", dispatched, n)
		}
		dispatched += res.Events
	}
	checkNotifies(t, "the dispatch of a hop's event", notes.take(ctx), n, budgetHopDispatchNotifies)
	if s, r := tracer.statements.Load(), tracer.roundTrips.Load(); s != int64(budgetHopDispatchStatements*n) || r != int64(budgetHopDispatchRoundTrips*n) {
		t.Errorf("the dispatch of a hop's event: %d statements and %d round trips for %d, want %d and %d each (the budget)",
			s, r, n, budgetHopDispatchStatements, budgetHopDispatchRoundTrips)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM ff_execution WHERE lane = 'hop-b' AND state = 'pending'`).Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != n {
		t.Fatalf("%d of %d downstreams pending after the dispatch", pending, n)
	}
	pool.Close()
	after := wc.read()
	checkWrites(t, "hop (completion and dispatch)", perExecution(t, before, after, n), budgetHopRows)
	checkInvariants(t, ctx, db.URL)
}

// A spawn costs the same statements and round trips however many steps
// it adds (one statement per table, unnest for the rows), and so do a
// wait and a signal: the budget below, counted exactly.
const (
	budgetSpawnStatements, budgetSpawnRoundTrips     = 18, 15
	budgetSuspendStatements, budgetSuspendRoundTrips = 7, 7
	budgetSignalStatements, budgetSignalRoundTrips   = 6, 6
)

func TestSpawnWaitSignalBudget(t *testing.T) {
	t.Parallel()
	ctx, db, _ := budgetSetup(t)
	setupPool := budgetPool(t, ctx, db.URL, nil, 4)
	creator := budgetClient(t, setupPool)
	var tracer statementCounter
	pool := budgetPool(t, ctx, db.URL, &tracer, 1)
	c := budgetClient(t, pool)
	warmDistributed(t, ctx, pool)
	count := func(what string, wantS, wantR int64, f func() error) {
		t.Helper()
		countCalls(t, &tracer, what, 1, wantS, wantR, f)
	}
	for _, width := range []int{10, 200} {
		lane := fmt.Sprintf("spawn-%d", width)
		_, err := creator.SubmitFlow(ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
			{Ref: "root", Params: ffd.CreateParams{Lane: lane}}, {Ref: "join", Params: ffd.CreateParams{Lane: lane + ".join"}}},
			Edges: []ffd.SubmitEdge{{From: "root", To: "join"}}})
		if err != nil {
			t.Fatal(err)
		}
		x, err := creator.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "budget/1"})
		if err != nil || len(x) != 1 {
			t.Fatalf("claim: %v", err)
		}
		items := make([]ffd.CreateParams, width)
		for i := range items {
			items[i] = ffd.CreateParams{Lane: lane + ".child"}
		}
		count(fmt.Sprintf("a spawn of %d into a join", width), budgetSpawnStatements, budgetSpawnRoundTrips, func() error {
			_, _, err := c.CompleteAndSpawn(ctx, x[0].ID, x[0].LeaseEpoch, nil, ffd.MapInto("c", items, "join"))
			return err
		})
	}
	y, err := creator.Create(ctx, ffd.CreateParams{Lane: "budget-wait"})
	if err != nil {
		t.Fatal(err)
	}
	xs, err := creator.Claim(ctx, ffd.ClaimParams{Lane: "budget-wait", Worker: "budget/1"})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v", err)
	}
	count("a signal wait", budgetSuspendStatements, budgetSuspendRoundTrips, func() error {
		_, err := c.Suspend(ctx, xs[0].ID, xs[0].LeaseEpoch, ffd.SuspendParams{Signal: "go"})
		return err
	})
	count("a signal that ends it", budgetSignalStatements, budgetSignalRoundTrips, func() error {
		_, err := c.Signal(ctx, ffd.SignalParams{Execution: &y.Execution.ID, Name: "go"})
		return err
	})
	setupPool.Close()
	pool.Close()
	checkInvariants(t, ctx, db.URL)
}

// Flow control's budget (docs/flow-control.md, "What it costs"), counted
// exactly.
var (
	// A claim of one keyed execution, the first of its pool in the lane:
	// the plain claim (its setting and the claim, one batch) finds
	// nothing in a lane with a control row; one probe reads the row; then
	// the controlled claim, one batch of the setting that puts it on
	// generic plans, the lane's lock (which locks only a capped or
	// rate-limited lane), the keys' turn and the claim.
	// The pool then remembers the lane is under control for a second
	// (store.controlTTL): the claims after go straight to the controlled
	// claim, one round trip. Its writes: the execution, and the key's row
	// (its turn).
	budgetFirstKeyedClaimStatements, budgetFirstKeyedClaimRoundTrips int64 = 7, 3
	budgetKeyedClaimStatements, budgetKeyedClaimRoundTrips           int64 = 4, 1
	// A claim that takes nothing from a lane under control: the
	// controlled claim, the probe (still under control?), the throttle.
	budgetThrottledClaimStatements, budgetThrottledClaimRoundTrips int64 = 6, 3
	// A create into a key already known: BEGIN, the key's record (which
	// writes nothing and locks the key's row FOR KEY SHARE), the insert
	// with its lane's notification (one batch), COMMIT.
	budgetKeyedCreateStatements, budgetKeyedCreateRoundTrips int64 = 5, 4

	budgetKeyedClaimRows = map[string]int{
		"ff_execution.upd": 1,
		"ff_key.upd":       1,
	}
)

func TestFlowControlBudget(t *testing.T) {
	t.Parallel()
	ctx, db, wc := budgetSetup(t)
	const n = 20
	setupPool := budgetPool(t, ctx, db.URL, nil, 4)
	creator := budgetClient(t, setupPool)
	var ps []ffd.CreateParams
	for i := range n {
		ps = append(ps, ffd.CreateParams{Lane: "budget-keyed", ConcurrencyKey: fmt.Sprint("k", i), ConcurrencyLimit: 1})
	}
	if _, err := creator.CreateMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := creator.CreateMany(ctx, []ffd.CreateParams{{Lane: "budget-capped", ConcurrencyKey: "a", ConcurrencyLimit: 1}, {Lane: "budget-capped", ConcurrencyKey: "a"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := creator.SetLaneLimit(ctx, "budget-capped", 5); err != nil {
		t.Fatal(err)
	}
	setupPool.Close()
	before := wc.read()

	var tracer statementCounter
	pool := budgetPool(t, ctx, db.URL, &tracer, 1)
	c := budgetClient(t, pool)
	warmDistributed(t, ctx, pool)
	count := func(what string, times int, wantS, wantR int64, f func() error) {
		t.Helper()
		countCalls(t, &tracer, what, times, wantS, wantR, f)
	}
	claim := func(lane string, max, want int) func() error {
		return func() error {
			xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: lane, Worker: "budget/1", Max: max})
			if err == nil && len(xs) != want {
				err = fmt.Errorf("claimed %d, want %d", len(xs), want)
			}
			return err
		}
	}
	notes := newNotifyCounter(t, ctx, db.URL)
	count("the first keyed claim", 1, budgetFirstKeyedClaimStatements, budgetFirstKeyedClaimRoundTrips, claim("budget-keyed", 1, 1))
	count("a keyed claim", n-1, budgetKeyedClaimStatements, budgetKeyedClaimRoundTrips, claim("budget-keyed", 1, 1))
	checkNotifies(t, "keyed claims", notes.take(ctx), n, 0)
	pool.Close()
	checkWrites(t, "a keyed claim", perExecution(t, before, wc.read(), n), budgetKeyedClaimRows)

	pool = budgetPool(t, ctx, db.URL, &tracer, 1)
	c = budgetClient(t, pool)
	warmDistributed(t, ctx, pool)
	count("the first keyed claim in a capped lane", 1, budgetFirstKeyedClaimStatements, budgetFirstKeyedClaimRoundTrips, claim("budget-capped", 1, 1))
	count("a keyed claim held back by its key", 1, budgetThrottledClaimStatements, budgetThrottledClaimRoundTrips, claim("budget-capped", 2, 0))
	count("a create into a known key", 1, budgetKeyedCreateStatements, budgetKeyedCreateRoundTrips, func() error {
		_, err := c.Create(ctx, ffd.CreateParams{Lane: "budget-keyed", ConcurrencyKey: "k1"})
		return err
	})
	pool.Close()
}

// countCalls runs f times times and checks that each call made wantS
// statements in wantR round trips, as tracer counted them.
func countCalls(t *testing.T, tracer *statementCounter, what string, times int, wantS, wantR int64, f func() error) {
	t.Helper()
	tracer.statements.Store(0)
	tracer.roundTrips.Store(0)
	for range times {
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	if s, r := tracer.statements.Load(), tracer.roundTrips.Load(); s != wantS*int64(times) || r != wantR*int64(times) {
		t.Errorf("%s: %d statements and %d round trips for %d, want %d and %d each (the budget)", what, s, r, times, wantS, wantR)
	}
}
