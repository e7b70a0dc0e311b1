package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The routed statements (the forms a distributed Postgres needs: one
// partition per locking statement) keep every behaviour on one Postgres,
// where CI can run them: claims in priority order, renewal, endings of
// one and of many partitions at once, retries, revokes, a flow's cascade
// and finish, and a flow's cancellation, with the store's invariants
// holding after. Not parallel: RouteAll reroutes the whole package.
func TestRoutedStatements(t *testing.T) {
	restore := store.RouteAll()
	defer restore()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	lim := leases.Limits{}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const n = 30
	ps := make([]ffdtype.CreateParams, n)
	for i := range ps {
		ps[i] = ffdtype.CreateParams{Lane: "routed", Priority: i % 3, MaxAttempts: 2}
	}
	_, err := leases.CreateMany(ctx, db.Pool, lim, ps)
	must(err)
	xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "routed", Worker: "w/1", Max: n})
	if err != nil || len(xs) != n {
		t.Fatalf("routed claim: %d of %d, %v", len(xs), n, err)
	}
	for i := 1; i < n; i++ {
		if xs[i].Priority > xs[i-1].Priority {
			t.Fatalf("claimed priority %d after %d", xs[i].Priority, xs[i-1].Priority)
		}
	}
	_, err = leases.Renew(ctx, db.Pool, xs[0].ID, xs[0].LeaseEpoch)
	must(err)
	// A worker's check of the leases it holds, after a reconnect: the one
	// at a later epoch than the row's is lost.
	gone, err := store.LostLeases(ctx, db.Pool, []store.LeaseRef{{ID: xs[0].ID, Epoch: xs[0].LeaseEpoch}, {ID: xs[1].ID, Epoch: xs[1].LeaseEpoch + 1}})
	must(err)
	if len(gone) != 1 || gone[0].ID != xs[1].ID {
		t.Fatalf("lost leases %+v, want only %s's at epoch %d", gone, xs[1].ID, xs[1].LeaseEpoch+1)
	}

	// Twenty completions over many partitions in one batch, as a worker
	// groups them.
	items := make([]leases.Completion, 20)
	for i := range items {
		items[i] = leases.Completion{ID: xs[i].ID, Epoch: xs[i].LeaseEpoch, Solo: true}
	}
	ends, errs, err := leases.CompleteMany(ctx, db.Pool, lim, items, time.Second)
	must(err)
	for i, e := range errs {
		if e != nil || ends[i].State != ffdtype.StateCompleted || ends[i].EventID == 0 {
			t.Fatalf("completion %d: %+v, %v; want completed with its event", i, ends[i], e)
		}
	}
	// Each completion's event is the one it was told of, born dispatched
	// (no flow): a shard's completions of solo executions write their
	// events apart from the update (terminateSplit).
	for i := range items {
		var event int64
		var dispatched bool
		err := db.Pool.QueryRow(ctx, `SELECT event_id, dispatched_at IS NOT NULL FROM ff_completion_event WHERE execution_id = $1`,
			xs[i].ID.UUID).Scan(&event, &dispatched)
		if err != nil || event != ends[i].EventID || !dispatched {
			t.Fatalf("event of completion %d: id %d dispatched %v, %v; want id %d, dispatched", i, event, dispatched, err, ends[i].EventID)
		}
	}
	end, err := leases.Fail(ctx, db.Pool, xs[20].ID, xs[20].LeaseEpoch, ffdtype.FailParams{Error: "e", Retryable: true, Immediate: true})
	if err != nil || end.State != ffdtype.StatePending {
		t.Fatalf("fail with a retry: %+v, %v; want pending", end, err)
	}
	again, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "routed", Worker: "w/1", Max: 1})
	if err != nil || len(again) != 1 || again[0].ID != xs[20].ID || again[0].Attempt != 2 {
		t.Fatalf("re-claim of the retry: %+v, %v; want %s at attempt 2", again, err, xs[20].ID)
	}
	end, err = leases.Fail(ctx, db.Pool, again[0].ID, again[0].LeaseEpoch, ffdtype.FailParams{Error: "e", Retryable: true})
	if err != nil || end.State != ffdtype.StateFailed {
		t.Fatalf("fail of the last attempt: %+v, %v; want failed", end, err)
	}
	end, err = leases.Cancel(ctx, db.Pool, xs[21].ID, "r", "me")
	if err != nil || end.State != ffdtype.StateCancelled {
		t.Fatalf("cancel: %+v, %v; want cancelled", end, err)
	}
	if _, err := leases.Complete(ctx, db.Pool, lim, xs[21].ID, xs[21].LeaseEpoch, nil); err == nil {
		t.Fatal("a completion after the cancel was not fenced out")
	}
	// The cancel took a running lease away: its lease event, with the
	// epoch that ended. The completions gave theirs up: none (the routed
	// ending without lease events).
	for _, c := range []struct {
		x    *ffdtype.Execution
		want string
	}{{xs[21], fmt.Sprintf("revoked@%d", xs[21].LeaseEpoch)}, {xs[5], ""}, {xs[19], ""}} {
		var got string
		if err := db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(event_type || '@' || lease_epoch, ','), '')
			FROM ff_lease_event WHERE execution_id = $1`, c.x.ID.UUID).Scan(&got); err != nil || got != c.want {
			t.Fatalf("lease events of %s: %q, %v; want %q", c.x.ID, got, err, c.want)
		}
	}
	rq, err := leases.Revoke(ctx, db.Pool, xs[22].ID, "r")
	if err != nil || rq.LeaseEpoch != xs[22].LeaseEpoch+1 {
		t.Fatalf("revoke: %+v, %v; want the epoch bumped", rq, err)
	}

	// A flow: a -> (b, c) -> d, all_of, cascaded and finished.
	sub, err := flows.Submit(ctx, db.Pool, lim, ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "fa"}}, {Ref: "b", Params: ffdtype.CreateParams{Lane: "fb"}},
			{Ref: "c", Params: ffdtype.CreateParams{Lane: "fb"}}, {Ref: "d", Params: ffdtype.CreateParams{Lane: "fd"}}},
		Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}, {From: "a", To: "c"}, {From: "b", To: "d"}, {From: "c", To: "d"}},
	})
	must(err)
	part := sub.Flow.Partition
	d := cascade.New(db.Pool, nil)
	// solo completes as a worker that says Solo does: wrongly here, of a
	// flow's member, whose flow is finished all the same.
	stepAs := func(lane string, want int, solo bool) {
		t.Helper()
		got, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 10})
		if err != nil || len(got) != want {
			t.Fatalf("claim on %s: %d, %v; want %d", lane, len(got), err, want)
		}
		for _, x := range got {
			if !solo {
				_, err := leases.Complete(ctx, db.Pool, lim, x.ID, x.LeaseEpoch, nil)
				must(err)
				continue
			}
			_, errs, err := leases.CompleteMany(ctx, db.Pool, lim, []leases.Completion{{ID: x.ID, Epoch: x.LeaseEpoch, Solo: true}}, 0)
			must(err)
			must(errs[0])
		}
		_, err = d.DispatchPartitions(ctx, []int16{part}, 100, nil)
		must(err)
	}
	step := func(lane string, want int) { t.Helper(); stepAs(lane, want, false) }
	step("fa", 1)
	step("fb", 2)
	stepAs("fd", 1, true)
	f, err := flows.Get(ctx, db.Pool, sub.Flow.ID)
	if err != nil || f.State != ffdtype.FlowCompleted {
		t.Fatalf("flow after its last member: %+v, %v; want completed", f, err)
	}

	// any_of with cancel_remaining: the loser is cancelled by the
	// sibling-cancel take.
	sub, err = flows.Submit(ctx, db.Pool, lim, ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{{Ref: "r", Params: ffdtype.CreateParams{Lane: "ar"}}, {Ref: "x", Params: ffdtype.CreateParams{Lane: "ax"}},
			{Ref: "y", Params: ffdtype.CreateParams{Lane: "ax"}},
			{Ref: "j", Params: ffdtype.CreateParams{Lane: "aj"}, Policy: &ffdtype.Policy{Kind: ffdtype.AnyOf, OnSatisfied: ffdtype.CancelRemaining}}},
		Edges: []ffdtype.SubmitEdge{{From: "r", To: "x"}, {From: "r", To: "y"}, {From: "x", To: "j"}, {From: "y", To: "j"}},
	})
	must(err)
	part = sub.Flow.Partition
	step("ar", 1)
	sibs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "ax", Worker: "w/1", Max: 2})
	if err != nil || len(sibs) != 2 {
		t.Fatalf("claim of the siblings: %d, %v", len(sibs), err)
	}
	_, err = leases.Complete(ctx, db.Pool, lim, sibs[0].ID, sibs[0].LeaseEpoch, nil)
	must(err)
	// Two partitions of two shards at once: one transaction each when
	// routed.
	res0, err := d.DispatchPartitions(ctx, []int16{(part + 1) % ffdtype.Partitions, part}, 100, nil)
	if err != nil || res0.Events != 1 || res0.CancelGroups != 1 {
		t.Fatalf("dispatch of the winner: %+v, %v; want one event and one group to cancel", res0, err)
	}
	groups, cancelled, err := d.CancelSiblings(ctx, 10)
	if err != nil || groups != 1 || cancelled != 1 {
		t.Fatalf("cancel siblings: %d groups, %d cancelled, %v; want 1 and 1", groups, cancelled, err)
	}
	if x, err := leases.Get(ctx, db.Pool, sibs[1].ID); err != nil || x.State != ffdtype.StateCancelled {
		t.Fatalf("the loser: %+v, %v; want cancelled", x, err)
	}

	// Another, cancelled with a member running.
	sub, err = flows.Submit(ctx, db.Pool, lim, ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "ca"}}, {Ref: "b", Params: ffdtype.CreateParams{Lane: "cb"}}},
		Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}},
	})
	must(err)
	running, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "ca", Worker: "w/1", Max: 1})
	if err != nil || len(running) != 1 {
		t.Fatalf("claim of the root: %d, %v", len(running), err)
	}
	res, err := flows.Cancel(ctx, db.Pool, sub.Flow.ID, ffdtype.CancelAll, "stop")
	if err != nil || len(res.Members) != 2 {
		t.Fatalf("cancel flow: %+v, %v; want both members cancelled", res, err)
	}
	if x, err := leases.Get(ctx, db.Pool, running[0].ID); err != nil || x.State != ffdtype.StateCancelled || x.LeaseEpoch != running[0].LeaseEpoch+1 {
		t.Fatalf("the running member after cancel_flow: %+v, %v; want cancelled and fenced", x, err)
	}
	// The sweeps: a lapsed lease, a passed deadline, an event left
	// undispatched by a lost notification.
	_, _, err = leases.Create(ctx, db.Pool, lim, ffdtype.CreateParams{Lane: "sweep", LeaseTTL: time.Second, MaxAttempts: 2})
	must(err)
	lapsing, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "sweep", Worker: "w/1", Max: 1})
	if err != nil || len(lapsing) != 1 {
		t.Fatalf("claim: %d, %v", len(lapsing), err)
	}
	late, _, err := leases.Create(ctx, db.Pool, lim, ffdtype.CreateParams{Lane: "late", Deadline: 50 * time.Millisecond})
	must(err)
	sub, err = flows.Submit(ctx, db.Pool, lim, ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "lost"}}, {Ref: "b", Params: ffdtype.CreateParams{Lane: "lost-b"}}},
		Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}},
	})
	must(err)
	lost, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "lost", Worker: "w/1", Max: 1})
	if err != nil || len(lost) != 1 {
		t.Fatalf("claim: %d, %v", len(lost), err)
	}
	_, err = leases.Complete(ctx, db.Pool, lim, lost[0].ID, lost[0].LeaseEpoch, nil)
	must(err)
	time.Sleep(1100 * time.Millisecond)
	if ex, err := leases.SweepLapsed(ctx, db.Pool, 10); err != nil || ex.Retried != 1 {
		t.Fatalf("sweep lapsed: %+v, %v; want one retried", ex, err)
	}
	if n, err := leases.SweepDeadlines(ctx, db.Pool, 10); err != nil || n != 1 {
		t.Fatalf("sweep deadlines: %d, %v; want one", n, err)
	}
	if x, err := leases.Get(ctx, db.Pool, late.ID); err != nil || x.State != ffdtype.StateExpired {
		t.Fatalf("past its deadline: %+v, %v; want expired", x, err)
	}
	// The sweep takes every event left undispatched (the lost one, and
	// those of the members the cancels above ended).
	if res, err := d.DispatchBatch(ctx, 100, 0); err != nil || res.Events == 0 {
		t.Fatalf("sweep dispatch: %+v, %v; want the events left", res, err)
	}
	if lag, err := store.DispatchLag(ctx, db.Pool); err != nil || lag != 0 {
		t.Fatalf("after the sweep an event still waits %v (%v)", lag, err)
	}
	if x, err := leases.Get(ctx, db.Pool, sub.Executions["b"].ID); err != nil || x.State != ffdtype.StatePending {
		t.Fatalf("the lost event's downstream: %+v, %v; want pending", x, err)
	}
	// Retention: every finished solo execution and finished flow goes,
	// partition by partition.
	time.Sleep(10 * time.Millisecond)
	ages := store.Ages{Default: time.Millisecond}
	if n, err := store.DeleteFinishedExecutions(ctx, db.Pool, ages, 1000); err != nil || n == 0 {
		t.Fatalf("retention of executions: %d, %v; want some", n, err)
	}
	if n, err := store.DeleteFinishedFlows(ctx, db.Pool, ages, 1000); err != nil || n == 0 {
		t.Fatalf("retention of flows: %d, %v; want some", n, err)
	}
	var left int
	must(db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_execution WHERE flow_id IS NULL AND terminal_at IS NOT NULL)
		+ (SELECT count(*) FROM ff_flow WHERE state <> 'open')`).Scan(&left))
	if left != 0 {
		t.Fatalf("%d finished executions and flows left after retention, want none", left)
	}
	if err := store.CheckInvariants(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}

// The routed keyed claim keeps weights across claims as the single-node
// one does: claimed one slot at a time, a key of weight 3 starts three
// for each one of a key of weight 1, in turns. Not parallel: RouteAll.
func TestRoutedWeightsHoldAcrossClaims(t *testing.T) {
	var ps []ffdtype.CreateParams
	for range 40 {
		ps = append(ps, ffdtype.CreateParams{Lane: "weights", ConcurrencyKey: "heavy"}, ffdtype.CreateParams{Lane: "weights", ConcurrencyKey: "light"})
	}
	ctx, db := routedWith(t, ps)
	three := 3
	if _, err := store.SetKey(ctx, db.Pool, "weights", "heavy", store.KeyChange{Weight: &three}); err != nil {
		t.Fatal(err)
	}
	var order []byte
	for range 20 {
		xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "weights", Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("routed claim of one: %d, %v", len(xs), err)
		}
		order = append(order, xs[0].ConcurrencyKey[0])
	}
	if got := string(order); got != "hhhlhhhlhhhlhhhlhhhl" {
		t.Fatalf("routed claims of one slot started %s; want turns of three heavy and one light", got)
	}
}

// The routed keyed claim reads each key's best due executions wherever
// they lie and takes each key's best: read shard by shard for a turn of
// many keys on few shards, and key by key, on the key's partitions, for
// one key on many shards (the two forms of routedPick). Not parallel:
// RouteAll.
func TestRoutedKeyedClaimReads(t *testing.T) {
	restore := store.RouteAll()
	defer restore()
	for _, c := range []struct {
		name   string
		keys   int
		shards []int // an execution of each key on each, of priority its index
		max    int
	}{
		{"twelve keys on two shards, read per shard", 12, []int{0, 1}, 12},
		{"one key on six shards, read per key", 1, []int{3, 7, 11, 15, 19, 23}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			db := testdb.New(t)
			n := 0
			for k := range c.keys {
				for prio, shard := range c.shards {
					n++
					p := ffdtype.CreateParams{Lane: "reads", ConcurrencyKey: fmt.Sprint("key-", k), Priority: prio,
						IdempotencyKey: idempotencyKeyOnShard(t, shard, n)}
					if _, _, err := leases.Create(ctx, db.Pool, leases.Limits{}, p); err != nil {
						t.Fatal(err)
					}
				}
			}
			xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "reads", Worker: "w/1", Max: c.max})
			if err != nil {
				t.Fatal(err)
			}
			// Each key's best first: per key, the highest priorities.
			want := map[string][]int{}
			for k := range c.keys {
				for i := range c.max / c.keys {
					want[fmt.Sprint("key-", k)] = append(want[fmt.Sprint("key-", k)], len(c.shards)-1-i)
				}
			}
			got := map[string][]int{}
			for _, x := range xs {
				got[x.ConcurrencyKey] = append(got[x.ConcurrencyKey], x.Priority)
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("claimed priorities by key %v; want %v", got, want)
			}
		})
	}
}

// The routed keyed claim takes its work from few shards: those of the
// first key in the turn order that can run, and of one more key's best;
// a key whose best lies elsewhere waits for a later claim, which serves
// it in its turn, rather than offering a worse execution on a chosen
// shard. Not parallel: RouteAll.
func TestRoutedKeyedClaimFocus(t *testing.T) {
	type exec struct {
		key             string
		shard, priority int
	}
	for _, c := range []struct {
		name   string
		execs  []exec
		claims [][]string // the keys each claim of six takes, in order
	}{
		{"six keys on six shards, two a claim, in turn order",
			[]exec{{"k0", 0, 0}, {"k1", 4, 0}, {"k2", 8, 0}, {"k3", 12, 0}, {"k4", 16, 0}, {"k5", 20, 0}},
			[][]string{{"k0", "k1"}, {"k2", "k3"}, {"k4", "k5"}}},
		{"a key whose best lies on a third shard waits for its turn",
			[]exec{{"a", 0, 0}, {"b", 8, 0}, {"c", 16, 5}, {"c", 0, 1}},
			[][]string{{"a", "b"}, {"c"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, db := routedWith(t, nil)
			for i, x := range c.execs {
				p := ffdtype.CreateParams{Lane: "focus", ConcurrencyKey: x.key, ConcurrencyLimit: 1,
					Priority: x.priority, IdempotencyKey: idempotencyKeyOnShard(t, x.shard, i)}
				if _, _, err := leases.Create(ctx, db.Pool, leases.Limits{}, p); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range c.claims {
				xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "focus", Worker: "w/1", Max: 6})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, x := range xs {
					got = append(got, x.ConcurrencyKey)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Fatalf("claim %d took the keys %v; want %v", i+1, got, want)
				}
				for _, x := range xs {
					if x.ConcurrencyKey == "c" && x.Priority != 5 {
						t.Fatalf("claim %d took key c's execution of priority %d; want its best, 5", i+1, x.Priority)
					}
				}
			}
		})
	}
}

// The routed throttle, read in one round trip, says what the
// single-node one says: a key out of tokens holds its due work back until
// its next token; a lane with nothing due holds nothing. Not parallel:
// RouteAll.
func TestRoutedThrottle(t *testing.T) {
	var ps []ffdtype.CreateParams
	for range 3 {
		ps = append(ps, ffdtype.CreateParams{Lane: "thr", ConcurrencyKey: "api"})
	}
	ctx, db := routedWith(t, ps)
	hourly := &ffdtype.Rate{Count: 1, Per: time.Hour, Burst: 1}
	if _, err := store.SetKey(ctx, db.Pool, "thr", "api", store.KeyChange{Rate: hourly}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1, 0} {
		xs, th, err := store.ClaimThrottled(ctx, db.Pool, "thr", nil, 10, "w/1")
		if err != nil || len(xs) != want {
			t.Fatalf("claim %d: %d executions, %v; want %d", i, len(xs), err, want)
		}
		if !th.Held || th.Retry < 59*time.Minute || th.Retry > time.Hour {
			t.Fatalf("claim %d: throttle %+v; want held, the key's next token in about an hour", i, th)
		}
	}
	th, err := store.ClaimThrottle(ctx, db.Pool, "idle", nil)
	if err != nil || th.Held || th.Retry != 0 {
		t.Fatalf("throttle of a lane with nothing due: %+v, %v; want not held", th, err)
	}
}

// The routed claim of a rate-limited, capped lane locks the lane's room
// and spends the lane's tokens there, as the single-node claim does, and
// its throttle reads them there. Not parallel: RouteAll.
func TestRoutedLaneRoom(t *testing.T) {
	var ps []ffdtype.CreateParams
	for range 3 {
		ps = append(ps, ffdtype.CreateParams{Lane: "rated"})
	}
	ctx, db := routedWith(t, ps)
	five := 5
	twoAnHour := &ffdtype.Rate{Count: 2, Per: time.Hour, Burst: 2}
	if _, err := store.SetLane(ctx, db.Pool, "rated", store.LaneChange{MaxRunning: &five, Rate: twoAnHour}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{2, 0} {
		xs, th, err := store.ClaimThrottled(ctx, db.Pool, "rated", nil, 10, "w/1")
		if err != nil || len(xs) != want {
			t.Fatalf("claim %d: %d executions, %v; want %d (the lane's burst, then none)", i, len(xs), err, want)
		}
		if !th.Held || th.Retry < 29*time.Minute || th.Retry > 30*time.Minute {
			t.Fatalf("claim %d: throttle %+v; want held, the lane's next token in about half an hour", i, th)
		}
		var tokens float64
		if err := db.Pool.QueryRow(ctx, `SELECT tokens FROM ff_lane_room WHERE lane = 'rated'`).Scan(&tokens); err != nil || tokens > 0.01 {
			t.Fatalf("claim %d: the lane's room holds %v tokens, %v; want the burst spent", i, tokens, err)
		}
	}
	if err := store.CheckInvariants(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}

// A controlled lane's claim on the routed form takes its room shard by
// shard from the hint of its connection, and returns every execution it
// took: the second claim below empties the hinted shard, finds the lane
// dry on a read of the hint, and must return what it took before that
// read (it returned nothing, and left them running for their leases to
// expire). Not parallel: RouteAll.
func TestRoutedControlledClaimReturnsWhatItTook(t *testing.T) {
	ctx, db := routedWith(t, nil)
	for i := range 3 { // on one shard
		p := ffdtype.CreateParams{Lane: "hinted", IdempotencyKey: idempotencyKeyOnShard(t, 5, i)}
		if _, _, err := leases.Create(ctx, db.Pool, leases.Limits{}, p); err != nil {
			t.Fatal(err)
		}
	}
	many := &ffdtype.Rate{Count: 1000, Per: time.Second, Burst: 1000}
	if _, err := store.SetLane(ctx, db.Pool, "hinted", store.LaneChange{Rate: many}); err != nil {
		t.Fatal(err)
	}
	// A pool of one connection: every claim's transaction has its hint.
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i, c := range []struct{ max, want int }{{1, 1}, {10, 2}, {10, 0}} {
		xs, _, err := store.ClaimThrottled(ctx, pool, "hinted", nil, c.max, "w/1")
		if err != nil || len(xs) != c.want {
			t.Fatalf("claim %d of up to %d: %d executions, %v; want %d", i, c.max, len(xs), err, c.want)
		}
	}
	var running int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_execution WHERE lane = 'hinted' AND state = 'running'`).Scan(&running); err != nil || running != 3 {
		t.Fatalf("%d running, %v; want the 3 the claims returned", running, err)
	}
}

// routedWith routes every statement for the test (store.RouteAll), and
// returns a context bounded by a minute and a database holding ps.
func routedWith(t *testing.T, ps []ffdtype.CreateParams) (context.Context, *testdb.DB) {
	t.Helper()
	t.Cleanup(store.RouteAll())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	db := testdb.New(t)
	if _, err := leases.CreateMany(ctx, db.Pool, leases.Limits{}, ps); err != nil {
		t.Fatal(err)
	}
	return ctx, db
}

// idempotencyKeyOnShard is an idempotency key that places its execution
// on a partition of shard (of the routed placement's 32), the nth such.
func idempotencyKeyOnShard(t *testing.T, shard, n int) string {
	t.Helper()
	for i := range 1 << 20 {
		k := fmt.Sprintf("on-%d-%d-%d", shard, n, i)
		if int(ident.KeyPartition("default", k))%32 == shard {
			return k
		}
	}
	t.Fatalf("no idempotency key on shard %d", shard)
	return ""
}

// The routed sweep of idle keys forgets a key only its executions named
// once none of them is live, and keeps a configured key and a busy one,
// matching each key to its own lane (a key of one name idle in one lane
// and busy in another). Its statements are a fixed few per lane, never
// one per key: on Citus each write of ff_key holds every keyed claim
// until commit. Not parallel: RouteAll.
func TestRoutedForgetIdleKeys(t *testing.T) {
	const idle = 40
	var ps []ffdtype.CreateParams
	for i := range idle {
		ps = append(ps, ffdtype.CreateParams{Lane: "forget-a", ConcurrencyKey: fmt.Sprintf("idle-%02d", i)})
	}
	ps = append(ps, ffdtype.CreateParams{Lane: "forget-a", ConcurrencyKey: "shared"},
		ffdtype.CreateParams{Lane: "forget-b", ConcurrencyKey: "shared"},
		ffdtype.CreateParams{Lane: "forget-b", ConcurrencyKey: "busy"})
	ctx, db := routedWith(t, ps)
	one := 1
	if _, err := store.SetKey(ctx, db.Pool, "forget-a", "kept", store.KeyChange{MaxRunning: &one}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE ff_execution SET state = 'cancelled', terminal_at = now(), cancellation_reason = 'test', cancelled_by = 'test'
		WHERE concurrency_key LIKE 'idle-%' OR (lane = 'forget-b' AND concurrency_key = 'shared')`); err != nil {
		t.Fatal(err)
	}
	cfg := db.Pool.Config().Copy()
	var statements atomic.Int64
	cfg.ConnConfig.Tracer = statementTracer{&statements}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	n, err := store.ForgetIdleKeys(ctx, pool, 100)
	if err != nil || n != idle+1 {
		t.Fatalf("ForgetIdleKeys = %d, %v; want %d (the idle keys of forget-a, and shared of forget-b)", n, err, idle+1)
	}
	// BEGIN, the setting, the read of the keys, the live keys, per lane
	// the locks, the live keys again, per lane the delete; COMMIT.
	if got, want := statements.Load(), int64(4+2+1+2+1); got != want {
		t.Errorf("the sweep of %d idle keys on 2 lanes took %d statements, want %d", idle+1, got, want)
	}
	var keys []string
	rows, _ := db.Pool.Query(ctx, `SELECT lane || '/' || key FROM ff_key WHERE lane LIKE 'forget-%' AND key <> '' ORDER BY 1`)
	for rows.Next() {
		var k string
		_ = rows.Scan(&k)
		keys = append(keys, k)
	}
	if want := []string{"forget-a/kept", "forget-a/shared", "forget-b/busy"}; rows.Err() != nil || !slices.Equal(keys, want) {
		t.Fatalf("keys left %v, %v; want %v", keys, rows.Err(), want)
	}
}

// statementTracer counts the statements sent, alone or in a batch.
type statementTracer struct{ n *atomic.Int64 }

func (s statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}
func (s statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (s statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (s statementTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {
	s.n.Add(1)
}
func (s statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// On a distributed Postgres the statistics refresh leaves every table to
// the nodes' own autovacuum: a filled ff_key never analyzed, which one
// Postgres analyzes (TestRefreshStatisticsOfYoungKeys), stays as it is.
// Not parallel: RouteAll.
func TestRoutedStatisticsLeftToNodes(t *testing.T) {
	restore := store.RouteAll()
	defer restore()
	b := newPlanBench(t)
	b.exec(`ALTER TABLE ff_key SET (autovacuum_enabled = false)`)
	b.exec(`INSERT INTO ff_key (lane, key, max_running) SELECT 'tenants', 'tenant-' || g, 1 FROM generate_series(1, 1000) g`)
	got, err := store.RefreshStaleStatistics(b.ctx, b.pool, 1000, 4)
	if err != nil || len(got) != 0 {
		t.Fatalf("routed refresh: want nothing refreshed, got %+v, %v", got, err)
	}
	var est int64
	if err := b.pool.QueryRow(b.ctx, `SELECT reltuples::bigint FROM pg_class WHERE oid = 'ff_key'::regclass`).Scan(&est); err != nil || est != -1 {
		t.Fatalf("after a routed refresh: ff_key estimated at %d rows (%v), want -1 (never analyzed)", est, err)
	}
}
