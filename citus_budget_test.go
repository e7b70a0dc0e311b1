package ffd_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/trigger"
)

// The Citus budget: what one execution costs a distributed Postgres,
// counted exactly on one Postgres with the routed statements
// (store.RouteAll; a partition's shard is its number modulo 32 there, as
// 256 partitions on Citus's default 32 shards).
//
//   - Statements that name more than one shard: a statement that locks
//     or writes rows of several shards commits in two phases, and one
//     that reads every shard costs the coordinator a task per shard. A
//     statement's shards are the partitions it is given (the smallint
//     arguments); one that reads a distributed table and is given none
//     reads every shard.
//   - Transactions that write more than one shard, from row triggers the
//     test adds, which record each written row's transaction and shard.
//   - Round trips, against the plain form's (TestWriteBudgetSolo,
//     TestWriteBudgetHop).
//
// A change that adds to any of these changes the budget here, in the same
// commit, and says why. docs/scaling.md explains each entry.
const (
	// A claim in its own transaction reads the shards with due work once
	// per hint (claimShards: one read without locks across the shards,
	// then one claim per shard it lists), and claims from one shard per
	// statement. With one execution due on each of the 32 shards, 32
	// claims of one make one read across the shards and 32 single-shard
	// claims: 33 round trips. The plain claim: one each.
	budgetCitusClaimRoundTrips = 33
	budgetCitusClaimWideReads  = 1
	// A completion in its own transaction: BEGIN, the ending and its
	// notification (one pipelined batch), COMMIT; the plain form's is one
	// implicit transaction (one round trip). A flow member's adds a batch
	// that locks and finishes its flow (the flow is found from what the
	// ending returned). A completion its caller knows to be of no flow (a
	// worker's: it claimed the execution and read its flow) finishes no
	// flow; it was one round trip, as the plain form's, and is two: its
	// ending as a router update, then its event as a router insert of
	// VALUES, BEGIN and COMMIT in those batches (terminateSplit). Citus
	// ran the one statement's modifying CTEs as subplans through
	// intermediate results: on one worker node claim to complete p50 12.8
	// to 9.7 ms and database time 331 to 259 µs an execution with the
	// extra round trip (docs/scaling.md).
	budgetCitusSoloCompleteRoundTrips      = 3
	budgetCitusKnownSoloCompleteRoundTrips = 2
	budgetCitusMemberCompleteRoundTrips    = 4
	// The notified dispatch of one partition: the plain form's round
	// trips (BEGIN, take, lock the group and resolve and count, decide
	// and unblock and notify, COMMIT), each statement naming the
	// partition. (Its commit waits for the flush, as every distributed
	// one: no set_config.)
	budgetCitusDispatchRoundTrips = 5
	// The notified dispatch of events on three partitions, two of them on
	// one shard: a transaction per shard, each of the round trips above,
	// its statements naming that shard's partitions (a transaction per
	// partition made it 15).
	budgetCitusShardDispatchRoundTrips = 2 * budgetCitusDispatchRoundTrips
	// Firing published events: one read across the shards for the
	// partitions with unfired events, then per shard one transaction
	// that writes that shard alone (the events' triggers start what lies
	// on their partitions): BEGIN, lock its events, now(), per event the
	// triggers' read, what each starts in a savepoint (an execution:
	// savepoint, its insert and notification, release; a flow of one
	// step: two savepoints, the flow, its step and notification, edges,
	// groups, the flow's counts, two releases) and the mark; the counts,
	// COMMIT. Three events of two triggers on each of two shards:
	// 1 + 2 * (3 + 3 * (1 + 3 + 9 + 1) + 2).
	budgetCitusFireRoundTrips = 95
)

// TestCitusBudget is not parallel: store.RouteAll is process-wide, and
// the package's parallel tests start only once the serial ones are done.
func TestCitusBudget(t *testing.T) {
	restore := store.RouteAll()
	defer restore()
	ctx, db, _ := budgetSetup(t)
	setupPool := budgetPool(t, ctx, db.URL, nil, 4)
	auditShardWrites(t, ctx, setupPool)
	creator := budgetClient(t, setupPool)
	for shard := range 32 {
		key := keyOnShard(t, "default", shard)
		if _, err := creator.Create(ctx, ffd.CreateParams{Lane: "citus-solo", IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	const hops = 8
	for range hops {
		if _, err := creator.SubmitFlow(ctx, ffd.SubmitFlowParams{
			Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "citus-a"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "citus-b"}}},
			Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	members, err := creator.Claim(ctx, ffd.ClaimParams{Lane: "citus-a", Worker: "budget/setup", Max: hops})
	if err != nil || len(members) != hops {
		t.Fatalf("claim the flows' first steps: %v (%d of %d)", err, len(members), hops)
	}
	clearShardWrites(t, ctx, setupPool)

	tracer := &shardTracer{}
	traced := budgetPool(t, ctx, db.URL, tracer, 1)
	c := budgetClient(t, traced)
	warmDistributed(t, ctx, traced)

	var solo []*ffd.Execution
	claims := tracer.measure(func() {
		for i := range 32 {
			xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: "citus-solo", Worker: "budget/1", Max: 1})
			if err != nil || len(xs) != 1 {
				t.Fatalf("claim %d: %v (%d claimed)", i, err, len(xs))
			}
			solo = append(solo, xs...)
		}
	})
	claims.check(t, "32 claims of one, one due per shard", budgetCitusClaimRoundTrips, budgetCitusClaimWideReads)

	for i, x := range solo {
		if i%2 == 0 {
			done := tracer.measure(func() {
				if _, err := c.Complete(ctx, x.ID, x.LeaseEpoch, nil); err != nil {
					t.Fatal(err)
				}
			})
			done.check(t, "a solo completion", budgetCitusSoloCompleteRoundTrips, 0)
			continue
		}
		done := tracer.measure(func() {
			ends, errs, err := leases.CompleteMany(ctx, traced, leases.Limits{},
				[]leases.Completion{{ID: x.ID, Epoch: x.LeaseEpoch, Solo: true}}, 0)
			if err != nil || errs[0] != nil || ends[0] == nil {
				t.Fatalf("complete %s as a worker does: %v %v", x.ID, err, errs)
			}
		})
		done.check(t, "a solo completion a worker records", budgetCitusKnownSoloCompleteRoundTrips, 0)
	}
	d := cascade.New(traced, nil)
	for _, x := range members {
		done := tracer.measure(func() {
			if _, err := c.Complete(ctx, x.ID, x.LeaseEpoch, nil); err != nil {
				t.Fatal(err)
			}
		})
		done.check(t, "a flow member's completion", budgetCitusMemberCompleteRoundTrips, 0)
		hop := tracer.measure(func() {
			res, err := d.DispatchPartitions(ctx, []int16{x.ID.Partition}, 10, func() {})
			if err != nil || res.Events != 1 {
				t.Fatalf("dispatch partition %d: %v (%d events)", x.ID.Partition, err, res.Events)
			}
		})
		hop.check(t, "the notified dispatch of a hop", budgetCitusDispatchRoundTrips, 0)
	}
	dispatchShards(t, ctx, creator, tracer, traced)
	fireOnShards(t, ctx, creator, tracer, traced)
	// A worker's claims and grouped completions, at concurrency: each
	// group of completions commits per shard.
	for i := range 64 {
		if _, err := creator.Create(ctx, ffd.CreateParams{Lane: "citus-worker", IdempotencyKey: fmt.Sprintf("worker-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	runWorkerUntil(t, budgetClient(t, budgetPool(t, ctx, db.URL, nil, 8)), ctx, "citus-worker", 64, 16)
	if n := multiShardWrites(t, ctx, setupPool); n != 0 {
		t.Errorf("%d transactions wrote rows of more than one shard, want 0 (the budget)", n)
	}
}

// A keyed claim on a distributed Postgres, of a lane a claim found under
// flow control a moment before (store's claimStillControlled, then
// claimControlledRouted): the lane's controls; then BEGIN; one batch of
// the transaction's setting, the time, the lane's row, the lane's keys,
// and the keys with due work and their partitions with every key's
// running executions (one read of every shard: two, before they were
// one union); the lock of the turn's keys, which reads what claims took
// of them since (their claimed counts; it was a second read of every
// shard, counting their running executions again); one batch of the
// candidates (a read of each shard holding due work of the turn's keys);
// the claim (a batch of a statement per shard, and one of the keys'
// turns and claimed counts: they were two); COMMIT. Eight keys due on two shards, four
// on each (a turn takes from the shards of its first key and one more:
// store's turnFocus). It was 14 round trips with each of those reads its own, and
// before that the candidates were read per key across the shards (8 more
// reads of every shard) after the plain claim's read of every shard for
// due work.
const (
	budgetCitusKeyedClaimRoundTrips = 7
	budgetCitusKeyedClaimWideReads  = 1
)

// A claim of a capped, rate-limited lane without keys on a distributed
// Postgres, found under control a moment before: the lane's controls;
// BEGIN; one batch of the setting, the time, the lock of the lane's room
// (ff_lane_room, one shard) with its tokens, the lane's row, and the
// count of what runs in it (a read of every shard); a claim of each shard
// of the lane's hint, which the claim before read (claimShards: it was
// one read of every shard for the lane's best due executions at each
// claim, then a batch of the shards' claims); the tokens spent (the
// lane's room); COMMIT. The lock and the tokens were the lane's row of
// ff_lane, a reference table: a lock on every node, and a two-phase
// commit over every node. A capped lane without a rate: its controls;
// BEGIN; the lock of its room and its row; the count of what runs; a
// claim of each shard of the hint; COMMIT (it was a read of every shard
// too, and a lock of ff_lane's row).
const (
	budgetCitusRatedClaimRoundTrips  = 7
	budgetCitusRatedClaimWideReads   = 1
	budgetCitusCappedClaimRoundTrips = 7
	budgetCitusCappedClaimWideReads  = 1
)

// TestCitusKeyedClaimBudget counts a keyed claim's statements on the
// routed form: a turn of eight keys on two shards reads the candidates
// shard by shard, no statement naming more than one shard. Not parallel: store.RouteAll.
func TestCitusKeyedClaimBudget(t *testing.T) {
	ctx, creator, tracer, c := claimBudgetSetup(t)
	create := func(key string, shard, n int) {
		t.Helper()
		if _, err := creator.Create(ctx, ffd.CreateParams{Lane: "citus-keyed", ConcurrencyKey: key,
			ConcurrencyLimit: 1, IdempotencyKey: keyOnShardN(t, "default", shard, n)}); err != nil {
			t.Fatal(err)
		}
	}
	// A first claim finds the lane under control.
	create("first", 1, 0)
	if xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: "citus-keyed", Worker: "budget/keyed", Max: 1}); err != nil || len(xs) != 1 {
		t.Fatalf("the first keyed claim: %v (%d claimed, want 1)", err, len(xs))
	}
	const keys = 8
	for k := range keys {
		create(fmt.Sprint("key-", k), 8*(k/4), k)
	}
	var xs []*ffd.Execution
	claim := tracer.measure(func() {
		var err error
		if xs, err = c.Claim(ctx, ffd.ClaimParams{Lane: "citus-keyed", Worker: "budget/keyed", Max: keys}); err != nil {
			t.Fatal(err)
		}
	})
	got := map[string]bool{}
	for _, x := range xs {
		got[x.ConcurrencyKey] = true
	}
	if len(xs) != keys || len(got) != keys {
		t.Fatalf("the keyed claim took %d executions of %d keys, want %d, one of each key", len(xs), len(got), keys)
	}
	claim.check(t, "a keyed claim of eight keys on two shards", budgetCitusKeyedClaimRoundTrips, budgetCitusKeyedClaimWideReads)
}

// claimBudgetSetup routes every statement until the test ends
// (store.RouteAll), and returns a client for the set-up, and a client of
// one connection whose statements tracer counts, warmed.
func claimBudgetSetup(t *testing.T) (context.Context, *ffd.Client, *shardTracer, *ffd.Client) {
	t.Helper()
	t.Cleanup(store.RouteAll())
	ctx, db, _ := budgetSetup(t)
	creator := budgetClient(t, budgetPool(t, ctx, db.URL, nil, 4))
	tracer := &shardTracer{}
	traced := budgetPool(t, ctx, db.URL, tracer, 1)
	warmDistributed(t, ctx, traced)
	return ctx, creator, tracer, budgetClient(t, traced)
}

// TestCitusRatedClaimBudget is not parallel: store.RouteAll.
func TestCitusRatedClaimBudget(t *testing.T) {
	ctx, creator, tracer, c := claimBudgetSetup(t)
	for li, tc := range []struct {
		lane              string
		rated             bool
		roundTrips, wides int
	}{
		{"citus-rated", true, budgetCitusRatedClaimRoundTrips, budgetCitusRatedClaimWideReads},
		{"citus-capped", false, budgetCitusCappedClaimRoundTrips, budgetCitusCappedClaimWideReads},
	} {
		const n = 8
		seen := 1000 * (li + 1) // idempotency keys of its own
		if _, err := creator.SetLaneLimit(ctx, tc.lane, 100, ffd.NewLane()); err != nil {
			t.Fatal(err)
		}
		if tc.rated {
			if _, err := creator.SetLaneRate(ctx, tc.lane, ffd.Rate{Count: 1000, Per: time.Second}, ffd.NewLane()); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n + 1 {
			if _, err := creator.Create(ctx, ffd.CreateParams{Lane: tc.lane, IdempotencyKey: keyOnShardN(t, "default", 8*(i%2), seen+i)}); err != nil {
				t.Fatal(err)
			}
		}
		// A first claim finds the lane under control, and reads its hint.
		if xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: tc.lane, Worker: "budget/controlled", Max: 1}); err != nil || len(xs) != 1 {
			t.Fatalf("%s: the first claim: %v (%d claimed, want 1)", tc.lane, err, len(xs))
		}
		var xs []*ffd.Execution
		claim := tracer.measure(func() {
			var err error
			if xs, err = c.Claim(ctx, ffd.ClaimParams{Lane: tc.lane, Worker: "budget/controlled", Max: n}); err != nil {
				t.Fatal(err)
			}
		})
		if len(xs) != n {
			t.Fatalf("%s: the claim took %d executions, want %d", tc.lane, len(xs), n)
		}
		claim.check(t, "a claim of lane "+tc.lane+" on two shards", tc.roundTrips, tc.wides)
	}
}

// Statements that write or lock a reference table, and ones that do not.
func TestWritesReference(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sql  string
		want bool
	}{
		{`SELECT paused, keyed FROM ff_lane WHERE lane = $1 FOR UPDATE`, true},
		{`UPDATE ff_lane SET tokens = $2, tokens_at = $3 WHERE lane = $1`, true},
		{`INSERT INTO ff_lane (lane, keyed) VALUES ($1, true) ON CONFLICT (lane) DO UPDATE SET keyed = true`, true},
		{`SELECT f.key FROM ff_key f JOIN ff_lane l ON l.lane = f.lane FOR NO KEY UPDATE OF l`, true},
		{`UPDATE ff_execution e SET state = 'running' WHERE e.ctid = ANY(ARRAY(SELECT p.ctid FROM ff_execution p
			WHERE NOT EXISTS (SELECT 1 FROM ff_lane l WHERE l.lane = $1) FOR NO KEY UPDATE OF p SKIP LOCKED))`, false},
		{`SELECT 1 FROM ff_lane_room WHERE lane = $1 FOR UPDATE`, false},
		{`UPDATE ff_lane_room SET tokens = $2, tokens_at = $3 WHERE lane = $1`, false},
		{`SELECT paused, max_running FROM ff_lane WHERE lane = $1`, false},
	} {
		if got := writesReference(tc.sql); got != tc.want {
			t.Errorf("writesReference(%q) = %v, want %v", tc.sql, got, tc.want)
		}
	}
}

// dispatchShards completes the first steps of flows on partitions 3 and
// 35 (one shard) and 4 (another), and dispatches the three events as a
// notification naming their partitions does: one transaction per shard.
func dispatchShards(t *testing.T, ctx context.Context, creator *ffd.Client, tracer *shardTracer, traced *pgxpool.Pool) {
	t.Helper()
	parts := []int16{3, 35, 4}
	for _, p := range parts {
		if _, err := creator.SubmitFlow(ctx, ffd.SubmitFlowParams{
			Flow:  ffd.CreateFlowParams{ID: ident.NewUUIDIn(p)},
			Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "citus-shard-a"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "citus-shard-b"}}},
			Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	firsts, err := creator.Claim(ctx, ffd.ClaimParams{Lane: "citus-shard-a", Worker: "budget/setup", Max: len(parts)})
	if err != nil || len(firsts) != len(parts) {
		t.Fatalf("claim the flows' first steps: %v (%d of %d)", err, len(firsts), len(parts))
	}
	for _, x := range firsts {
		if _, err := creator.Complete(ctx, x.ID, x.LeaseEpoch, nil); err != nil {
			t.Fatal(err)
		}
	}
	d := cascade.New(traced, nil)
	hops := tracer.measure(func() {
		res, err := d.DispatchPartitions(ctx, parts, 10, func() {})
		if err != nil || res.Events != len(parts) || len(res.Decided) != len(parts) {
			t.Fatalf("dispatch partitions %v: %+v, %v; want %d events and decisions", parts, res, err, len(parts))
		}
	})
	hops.check(t, "the notified dispatch of three partitions on two shards", budgetCitusShardDispatchRoundTrips, 0)
	next, err := creator.Claim(ctx, ffd.ClaimParams{Lane: "citus-shard-b", Worker: "budget/setup", Max: len(parts)})
	if err != nil || len(next) != len(parts) {
		t.Fatalf("claim the flows' second steps: %v (%d of %d); want all made pending", err, len(next), len(parts))
	}
}

// fireOnShards publishes events of a flow trigger and an execution
// trigger on two shards and fires them: one read across the shards finds
// their partitions, then each partition's events fire in one transaction
// that writes its shard alone (what they start lies on their partition).
func fireOnShards(t *testing.T, ctx context.Context, creator *ffd.Client, tracer *shardTracer, traced *pgxpool.Pool) {
	t.Helper()
	flow := ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "citus-fired"}}}}
	for _, p := range []ffd.TriggerParams{{Name: "budget-flow", Event: "budget", Flow: &flow},
		{Name: "budget-exec", Event: "budget", Execution: &ffd.CreateParams{Lane: "citus-fired"}}} {
		if _, err := creator.CreateTrigger(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	const perShard = 3
	for _, shard := range []int{5, 6} {
		for n := range perShard {
			key := ""
			for i := 0; key == ""; i++ {
				if k := fmt.Sprintf("event-%d-%d-%d", shard, n, i); int(store.EventPartition("default", "budget", k))%32 == shard {
					key = k
				}
			}
			if _, err := creator.PublishEvent(ctx, ffd.PublishParams{Name: "budget", Key: key}); err != nil {
				t.Fatal(err)
			}
		}
	}
	fire := tracer.measure(func() {
		res, err := trigger.Fire(ctx, traced, leases.Limits{}, 100, 1, zap.NewNop())
		if err != nil || res.Events != 2*perShard || res.Started != 4*perShard {
			t.Fatalf("fire the events: %+v, %v; want %d fired, %d started", res, err, 2*perShard, 4*perShard)
		}
	})
	fire.check(t, "firing the events of two partitions", budgetCitusFireRoundTrips, 1)
}

// runWorkerUntil runs a worker of that concurrency on lane until its
// handler has run n times, and stops it (within 10 s).
func runWorkerUntil(t *testing.T, c *ffd.Client, ctx context.Context, lane string, n int64, concurrency int) {
	t.Helper()
	var handled atomic.Int64
	w, err := ffd.NewWorker(c, ffd.WorkerConfig{Lanes: []string{lane}, Concurrency: concurrency,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { handled.Add(1); return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for handled.Load() < n {
		if ctx.Err() != nil {
			t.Fatalf("%d of %d handled before the test's deadline", handled.Load(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	stopCtx, stop := context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
}

// keyOnShard finds an idempotency key whose partition (the execution's,
// ident.KeyPartition) is on shard of 32.
func keyOnShard(t *testing.T, namespace string, shard int) string {
	t.Helper()
	return keyOnShardN(t, namespace, shard, 0)
}

// keyOnShardN is keyOnShard's nth key.
func keyOnShardN(t *testing.T, namespace string, shard, n int) string {
	t.Helper()
	for i := range 1 << 20 {
		k := fmt.Sprintf("shard-%d-%d-%d", shard, n, i)
		if int(ident.KeyPartition(namespace, k))%32 == shard {
			return k
		}
	}
	t.Fatalf("no key on shard %d", shard)
	return ""
}

// distributedTables are the tables a distributed Postgres shards by
// partition_key (store.CheckDistribution places them so).
var distributedTables = regexp.MustCompile(`\bff_(execution|flow|attempt|edge|edge_group|pending_cancel_group|completion_event|lease_event|signal|wait|spawned|event|trigger_fired)\b`)

// auditShardWrites adds row triggers that record, for every row written
// to a distributed table, its transaction and shard.
func auditShardWrites(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	sql := `CREATE TABLE budget_shard_write (txid xid8, shard int);
		CREATE FUNCTION budget_shard_write() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			INSERT INTO budget_shard_write VALUES (pg_current_xact_id(),
				(CASE WHEN TG_OP = 'DELETE' THEN OLD.partition_key ELSE NEW.partition_key END) % 32);
			RETURN NULL;
		END$$;`
	for _, table := range []string{"ff_execution", "ff_flow", "ff_attempt", "ff_edge", "ff_edge_group", "ff_pending_cancel_group",
		"ff_completion_event", "ff_lease_event", "ff_signal", "ff_wait", "ff_spawned", "ff_event", "ff_trigger_fired"} {
		sql += fmt.Sprintf(`CREATE TRIGGER budget_shard_write AFTER INSERT OR UPDATE OR DELETE ON %s
			FOR EACH ROW EXECUTE FUNCTION budget_shard_write();`, table)
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("add the shard-write triggers: %v", err)
	}
}

// clearShardWrites forgets what the set-up wrote.
func clearShardWrites(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(ctx, `TRUNCATE budget_shard_write`); err != nil {
		t.Fatal(err)
	}
}

// multiShardWrites counts the transactions that wrote rows of more than
// one shard.
func multiShardWrites(t *testing.T, ctx context.Context, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT txid FROM budget_shard_write
		GROUP BY txid HAVING count(DISTINCT shard) > 1) m`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// shardTracer records what a pool sends: each statement with the shards
// it names, and round trips (a batch is one).
type shardTracer struct {
	mu         sync.Mutex
	statements []tracedStatement
	roundTrips int
}

type tracedStatement struct {
	sql    string
	shards map[int16]bool // the partitions' shards among its arguments
}

// shardsOf reads the shards (partition modulo 32) a statement's
// arguments name: ffd passes partitions, and nothing else, as smallints.
func shardsOf(args []any) map[int16]bool {
	out := map[int16]bool{}
	for _, a := range args {
		switch v := a.(type) {
		case int16:
			out[v%32] = true
		case []int16:
			for _, p := range v {
				out[p%32] = true
			}
		}
	}
	return out
}

func (s *shardTracer) add(sql string, args []any, roundTrip bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.statements = append(s.statements, tracedStatement{sql: sql, shards: shardsOf(args)})
	if roundTrip {
		s.roundTrips++
	}
}

func (s *shardTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.add(d.SQL, d.Args, true)
	return ctx
}
func (s *shardTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s *shardTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.mu.Lock()
	s.roundTrips++
	s.mu.Unlock()
	return ctx
}
func (s *shardTracer) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	s.add(d.SQL, d.Args, false)
}
func (s *shardTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// traced is what a pool sent while one operation ran.
type traced struct {
	statements []tracedStatement
	roundTrips int
}

// measure runs f and returns what the pool sent meanwhile.
func (s *shardTracer) measure(f func()) traced {
	s.mu.Lock()
	s.statements, s.roundTrips = nil, 0
	s.mu.Unlock()
	f()
	s.mu.Lock()
	defer s.mu.Unlock()
	return traced{statements: s.statements, roundTrips: s.roundTrips}
}

// writesReference reports a statement that writes or locks rows of a
// reference table: on a distributed Postgres that takes a lock on every
// node until a two-phase commit, and such statements run one at a time
// across the cluster. A locking clause locks the tables its OF names
// (their aliases), or, without OF, every table of its FROM.
func writesReference(sql string) bool {
	names := strings.Join(store.ReferenceTables, "|")
	if regexp.MustCompile(`(?is)\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+(` + names + `)\b`).MatchString(sql) {
		return true
	}
	for _, m := range lockingClause.FindAllStringSubmatch(sql, -1) {
		if m[2] == "" {
			if regexp.MustCompile(`(?is)\bFROM\s+(` + names + `)\b`).MatchString(sql) {
				return true
			}
			continue
		}
		for _, alias := range strings.Split(m[2], ",") {
			if aliasOf(sql, regexp.QuoteMeta(strings.TrimSpace(alias)), names) {
				return true
			}
		}
	}
	return false
}

// lockingClause finds FOR UPDATE and its kin, with the aliases of OF.
var lockingClause = regexp.MustCompile(`(?is)\bFOR\s+(UPDATE|NO\s+KEY\s+UPDATE|SHARE|KEY\s+SHARE)\b(?:\s+OF\s+([a-z_][a-z0-9_]*(?:\s*,\s*[a-z_][a-z0-9_]*)*))?`)

// aliasOf reports alias naming a reference table in sql: the table
// itself, or one FROM or JOIN binds to it.
func aliasOf(sql, alias, names string) bool {
	return regexp.MustCompile(`(?is)^(`+names+`)$`).MatchString(alias) ||
		regexp.MustCompile(`(?is)\b(FROM|JOIN)\s+(`+names+`)\s+(AS\s+)?`+alias+`\b`).MatchString(sql)
}

// check compares an operation's round trips and its reads across every
// shard with the budget, and refuses any statement that names more than
// one shard, or writes or locks a reference table.
func (tr traced) check(t *testing.T, what string, roundTrips, wideReads int) {
	t.Helper()
	wide := 0
	for _, st := range tr.statements {
		if writesReference(st.sql) {
			t.Errorf("%s: a statement writes or locks a reference table, on every node, want none:\n%s", what, st.sql)
		}
		switch {
		case !distributedTables.MatchString(st.sql):
			// BEGIN, COMMIT, a setting, a notification: no shard.
		case len(st.shards) > 1:
			t.Errorf("%s: a statement names %d shards, want 1 (the budget):\n%s", what, len(st.shards), st.sql)
		case len(st.shards) == 0:
			wide++
			if wide > wideReads {
				t.Errorf("%s: a statement reads every shard, beyond the budget's %d:\n%s", what, wideReads, st.sql)
			}
		}
	}
	if wide != wideReads {
		t.Errorf("%s: %d statements read every shard, want %d (the budget)", what, wide, wideReads)
	}
	if tr.roundTrips != roundTrips {
		t.Errorf("%s: %d round trips, want %d (the budget)", what, tr.roundTrips, roundTrips)
	}
}

// TestShardClaimsAreFair: on a distributed Postgres a claim visits the
// shards of its hint in turn (store's claimShards), so work that became
// the lane's best after the hint was read waits at most one visit of
// each shard ahead of it: shardVisit (512) executions of a deep backlog
// on another shard, however deep. Not parallel: store.RouteAll is
// process-wide.
func TestShardClaimsAreFair(t *testing.T) {
	restore := store.RouteAll()
	defer restore()
	ctx, db, _ := budgetSetup(t)
	pool := budgetPool(t, ctx, db.URL, nil, 4)
	c := budgetClient(t, pool)
	const backlog, urgent, visit = 1500, 5, 512
	for i := range backlog {
		if _, err := c.Create(ctx, ffd.CreateParams{Lane: "fair", IdempotencyKey: keyOnShardN(t, "default", 0, i)}); err != nil {
			t.Fatal(err)
		}
	}
	claim := func() []*ffd.Execution {
		t.Helper()
		xs, err := c.Claim(ctx, ffd.ClaimParams{Lane: "fair", Worker: "fair/1", Max: 50})
		if err != nil {
			t.Fatal(err)
		}
		return xs
	}
	before := len(claim()) // reads the hint: the backlog's shard alone
	for i := range urgent {
		if _, err := c.Create(ctx, ffd.CreateParams{Lane: "fair", Priority: 10, IdempotencyKey: keyOnShardN(t, "default", 1, backlog+i)}); err != nil {
			t.Fatal(err)
		}
	}
	ahead, found := 0, 0
	for found < urgent {
		xs := claim()
		if len(xs) == 0 {
			t.Fatalf("the lane ran dry with %d of %d urgent executions claimed", found, urgent)
		}
		for _, x := range xs {
			if x.Priority == 10 {
				found++
			} else if found < urgent {
				ahead++
			}
		}
	}
	if before+ahead > visit {
		t.Errorf("%d executions of the backlog's shard were claimed before the %d urgent ones of another, want at most one visit (%d)", before+ahead, urgent, visit)
	}
	if before+ahead == 0 {
		t.Errorf("the urgent executions came first: the claim read the lane anew, so this test does not test a visit")
	}
}
