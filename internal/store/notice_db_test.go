package store_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// heard is what a listener heard: per channel, the items of every
// payload ("" for an empty payload), sorted, and how many notifications.
type heard struct {
	items map[string][]string
	count map[string]int
}

// notices listens on every channel and returns a function that gathers
// what arrives until 300 ms pass in silence.
func notices(t *testing.T, ctx context.Context, url string) func() heard {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, c := range store.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+c); err != nil {
			t.Fatal(err)
		}
	}
	return func() heard {
		t.Helper()
		h := heard{items: map[string][]string{}, count: map[string]int{}}
		for {
			wait, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			n, err := conn.WaitForNotification(wait)
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					t.Fatal(err)
				}
				for _, it := range h.items {
					slices.Sort(it)
				}
				return h
			}
			h.count[n.Channel]++
			if n.Payload == "" {
				h.items[n.Channel] = append(h.items[n.Channel], "")
			}
			h.items[n.Channel] = append(h.items[n.Channel], store.SplitPayload(n.Payload)...)
		}
	}
}

// Every writer announces its write itself, on the channels and with the
// payloads docs/schema.md ("Notifications") gives, one notification per
// channel, sent at its commit and not at all when it rolls back.
func TestWritersNotify(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := testdb.New(t)
	collect := notices(t, ctx, db.URL)
	lim := leases.Limits{}
	part := func(x *ffdtype.Execution) string { return strconv.Itoa(int(x.ID.Partition)) }
	check := func(what string, want map[string][]string) {
		t.Helper()
		h := collect()
		for c, items := range want {
			slices.Sort(items)
			if !slices.Equal(h.items[c], items) {
				t.Errorf("%s: %s heard %q, want %q", what, c, h.items[c], items)
			}
			if h.count[c] != 1 {
				t.Errorf("%s: %d notifications on %s, want one", what, h.count[c], c)
			}
		}
		for c := range h.items {
			if _, ok := want[c]; !ok {
				t.Errorf("%s: %s heard %q, want nothing", what, c, h.items[c])
			}
		}
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	create := func(p ffdtype.CreateParams) *ffdtype.Execution {
		t.Helper()
		x, _, err := leases.Create(ctx, db.Pool, lim, p)
		must(err)
		return x
	}
	claim := func(lane string) *ffdtype.Execution {
		t.Helper()
		xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
		if err != nil || len(xs) != 1 {
			t.Fatalf("claim on %s: %d claimed, %v", lane, len(xs), err)
		}
		collect() // a claim announces nothing; checked below
		return xs[0]
	}

	create(ffdtype.CreateParams{Lane: "a"})
	check("create", map[string][]string{store.ChannelReady: {"a"}})
	create(ffdtype.CreateParams{Lane: "a", Delay: time.Hour})
	check("create delayed", nil)
	create(ffdtype.CreateParams{Lane: "keyed", IdempotencyKey: "k1"})
	check("create with a key", map[string][]string{store.ChannelReady: {"keyed"}})

	tx, err := db.Pool.Begin(ctx)
	must(err)
	_, _, err = leases.Create(ctx, tx, lim, ffdtype.CreateParams{Lane: "rolled-back"})
	must(err)
	must(tx.Rollback(ctx))
	check("create rolled back", nil)

	_, err = leases.CreateMany(ctx, db.Pool, lim, []ffdtype.CreateParams{{Lane: "b"}, {Lane: "c"}, {Lane: "b"}, {Lane: "d", Delay: time.Hour}})
	must(err)
	check("create many", map[string][]string{store.ChannelReady: {"b", "c"}})
	big := make([]ffdtype.CreateParams, store.CopyThreshold)
	for i := range big {
		big[i] = ffdtype.CreateParams{Lane: "copied"}
	}
	_, err = leases.CreateMany(ctx, db.Pool, lim, big)
	must(err)
	check("create many by COPY", map[string][]string{store.ChannelReady: {"copied"}})

	// A claim announces nothing; a renewal its lease event; a completion
	// not known to be solo its partition, for the daemon.
	x := claim("a")
	check("claim", nil)
	_, err = leases.Renew(ctx, db.Pool, x.ID, x.LeaseEpoch)
	must(err)
	check("renew", map[string][]string{store.ChannelLease: {part(x)}})
	_, err = leases.Complete(ctx, db.Pool, lim, x.ID, x.LeaseEpoch, nil)
	must(err)
	check("complete", map[string][]string{store.ChannelCompletion: {part(x)}})

	// A retry after backoff tells the daemon when it comes due; one at
	// once tells the lane's workers.
	x = create(ffdtype.CreateParams{Lane: "retry", Retry: ffdtype.RetryPolicy{Base: time.Minute}})
	collect()
	x = claim("retry")
	end, err := leases.Fail(ctx, db.Pool, x.ID, x.LeaseEpoch, ffdtype.FailParams{Error: "e", Retryable: true})
	must(err)
	check("fail with backoff", map[string][]string{store.ChannelLease: {store.DuePrefix + strconv.FormatInt(end.RunAt.UnixMilli(), 10)}})
	y := create(ffdtype.CreateParams{Lane: "again"})
	collect()
	y = claim("again")
	_, err = leases.Fail(ctx, db.Pool, y.ID, y.LeaseEpoch, ffdtype.FailParams{Error: "e", Retryable: true, Immediate: true})
	must(err)
	check("fail at once", map[string][]string{store.ChannelReady: {"again"}})

	// A revoke puts the execution back and takes the lease from its
	// holder, at the epoch it held.
	y = claim("again")
	_, err = leases.Revoke(ctx, db.Pool, y.ID, "op")
	must(err)
	check("revoke", map[string][]string{
		store.ChannelReady:  {"again"},
		store.ChannelLease:  {part(y)},
		store.ChannelRevoke: {part(y) + ":" + y.ID.UUID.String() + ":" + strconv.FormatInt(y.LeaseEpoch, 10)},
	})
	// A cancel of a running execution ends whichever attempt runs.
	y = claim("again")
	_, err = leases.Cancel(ctx, db.Pool, y.ID, "op", "me")
	must(err)
	check("cancel", map[string][]string{
		store.ChannelCompletion: {part(y)},
		store.ChannelLease:      {part(y)},
		store.ChannelRevoke:     {part(y) + ":" + y.ID.UUID.String() + ":0"},
	})

	// A flow: the root's lane is told; the downstream's when the cascade
	// unblocks it.
	sub, err := flows.Submit(ctx, db.Pool, lim, ffdtype.SubmitFlowParams{
		Nodes: []ffdtype.SubmitNode{{Ref: "r", Params: ffdtype.CreateParams{Lane: "root"}}, {Ref: "d", Params: ffdtype.CreateParams{Lane: "down"}}},
		Edges: []ffdtype.SubmitEdge{{From: "r", To: "d"}},
	})
	must(err)
	check("submit flow", map[string][]string{store.ChannelReady: {"root"}})
	r := claim("root")
	_, err = leases.Complete(ctx, db.Pool, lim, r.ID, r.LeaseEpoch, nil)
	must(err)
	check("complete a member", map[string][]string{store.ChannelCompletion: {part(r)}})
	res, err := cascade.New(db.Pool, nil).DispatchPartitions(ctx, []int16{r.ID.Partition}, 10, nil)
	must(err)
	if res.Events != 1 || len(res.Decided) != 1 {
		t.Fatalf("dispatch of the root's partition took %d events and decided %d groups, want 1 and 1", res.Events, len(res.Decided))
	}
	check("cascade", map[string][]string{store.ChannelReady: {"down"}})

	d := claim("down")
	_, err = leases.Fail(ctx, db.Pool, d.ID, d.LeaseEpoch, ffdtype.FailParams{Error: "e"})
	must(err)
	check("fail the last member", map[string][]string{store.ChannelCompletion: {part(d)}})

	// Rerunning the failed flow carries the root's result; its event
	// is the cascade's, and the downstream waits for it. (The root is
	// inserted pending and carried in the same transaction: its lane
	// hears a hint that finds nothing, like after a lost race.)
	again, err := flows.RerunFlow(ctx, db.Pool, lim, sub.Flow.ID)
	must(err)
	check("rerun flow", map[string][]string{store.ChannelCompletion: {part(r)}, store.ChannelReady: {"root"}})
	_, err = cascade.New(db.Pool, nil).DispatchPartitions(ctx, []int16{r.ID.Partition}, 10, nil)
	must(err)
	check("cascade of the rerun", map[string][]string{store.ChannelReady: {"down"}})

	// Cancelling a flow wakes the outbox's consumers for the flow's
	// event (born dispatched) and announces each member it ended.
	d = claim("down")
	_, err = flows.Cancel(ctx, db.Pool, again.Flow.ID, ffdtype.CancelAll, "stop")
	must(err)
	h := collect()
	for c, want := range map[string][]string{
		store.ChannelCompletion: {"", part(d)},
		store.ChannelLease:      {part(d)},
		store.ChannelRevoke:     {part(d) + ":" + d.ID.UUID.String() + ":0"},
	} {
		if !slices.Equal(h.items[c], want) {
			t.Errorf("cancel flow: %s heard %q, want %q", c, h.items[c], want)
		}
	}

	// Delayed executions that come due: the daemon tells their lanes.
	since := time.Now().Add(-time.Second)
	create(ffdtype.CreateParams{Lane: "soon", Delay: 50 * time.Millisecond})
	check("create delayed briefly", nil)
	time.Sleep(100 * time.Millisecond)
	lanes, _, err := store.NotifyDueLanes(ctx, db.Pool, since)
	must(err)
	if !slices.Contains(lanes, "soon") {
		t.Errorf("due lanes %v do not hold soon", lanes)
	}
	check("due lanes", map[string][]string{store.ChannelReady: slices.Clone(lanes)})
}
