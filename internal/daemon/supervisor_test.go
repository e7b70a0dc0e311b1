package daemon_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// One write sends one notification per channel, whatever the number of
// rows it wrote, naming partitions and lanes rather than rows: a batch
// create one ff_ready naming its lane; a claim of 50 nothing (it writes
// no lease event); completing 25 the worker knows are solo one empty
// ff_completion (their events are born dispatched, and a lease its holder
// gives up writes no event), 25 it does not know so one naming their
// partitions; cancelling 10 running ones one ff_lease and one
// ff_completion naming their partitions and one ff_revoke naming the 10.
func TestOneNotificationPerWrite(t *testing.T) {
	t.Parallel()
	f := setup(t)
	conn, err := pgx.Connect(f.Ctx, f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(f.Ctx, `LISTEN ff_lease; LISTEN ff_completion; LISTEN ff_ready; LISTEN ff_revoke`); err != nil {
		t.Fatal(err)
	}
	// collect gathers what arrives until 300 ms pass in silence.
	collect := func() map[string][]string {
		t.Helper()
		got := map[string][]string{}
		for {
			ctx, cancel := context.WithTimeout(f.Ctx, 300*time.Millisecond)
			n, err := conn.WaitForNotification(ctx)
			cancel()
			if err != nil {
				if f.Ctx.Err() != nil {
					t.Fatal(err)
				}
				return got
			}
			got[n.Channel] = append(got[n.Channel], n.Payload)
		}
	}
	// A batch create wakes each lane with claimable work once; delayed
	// executions wake nobody.
	ps := make([]ffdtype.CreateParams, 60)
	for i := range ps {
		ps[i] = ffdtype.CreateParams{Lane: "batch"}
		if i >= 50 {
			ps[i] = ffdtype.CreateParams{Lane: "later", Delay: time.Hour}
		}
	}
	if _, err := leases.CreateMany(f.Ctx, f.DB.Pool, leases.Limits{}, ps); err != nil {
		t.Fatal(err)
	}
	if got := collect(); len(got) != 1 || len(got["ff_ready"]) != 1 || got["ff_ready"][0] != "batch" {
		t.Fatalf("a batch create notified %v, want one ff_ready for lane batch", got)
	}
	xs, err := leases.Claim(f.Ctx, f.DB.Pool, ffdtype.ClaimParams{Lane: "batch", Worker: "w/1", Max: 50})
	if err != nil || len(xs) != 50 {
		t.Fatalf("claimed %d of 50: %v", len(xs), err)
	}
	// A claim writes no lease event (migration 00018): it notifies nobody.
	if got := collect(); len(got) != 0 {
		t.Fatalf("a claim of 50 notified %v, want nothing", got)
	}
	complete := func(items []leases.Completion) {
		t.Helper()
		_, errs, err := leases.CompleteMany(f.Ctx, f.DB.Pool, leases.Limits{}, items, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
	}
	items := make([]leases.Completion, len(xs))
	for i, x := range xs {
		items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch, Solo: i < 25}
	}
	complete(items[:25])
	if got := collect(); len(got) != 1 || len(got["ff_completion"]) != 1 || got["ff_completion"][0] != "" {
		t.Fatalf("completing 25 solo executions notified %v, want one empty ff_completion", got)
	}
	complete(items[25:])
	got := collect()
	if len(got) != 1 || len(got["ff_completion"]) != 1 {
		t.Fatalf("completing 25 executions not known solo notified %v, want one ff_completion", got)
	}
	wantPartitions(t, "ff_completion", got["ff_completion"][0], xs[25:])

	// Leases taken away: one notification per channel covers them all.
	more := make([]ffdtype.CreateParams, 10)
	for i := range more {
		more[i] = ffdtype.CreateParams{Lane: "batch"}
	}
	if _, err := leases.CreateMany(f.Ctx, f.DB.Pool, leases.Limits{}, more); err != nil {
		t.Fatal(err)
	}
	xs, err = leases.Claim(f.Ctx, f.DB.Pool, ffdtype.ClaimParams{Lane: "batch", Worker: "w/1", Max: 10})
	if err != nil || len(xs) != 10 {
		t.Fatalf("claimed %d of 10: %v", len(xs), err)
	}
	collect()
	ends := make([]store.Termination, len(xs))
	for i, x := range xs {
		ends[i] = store.Termination{ID: x.ID, State: ffdtype.StateCancelled, Reason: "r", By: "b"}
	}
	if _, err := store.Terminate(f.Ctx, f.DB.Pool, ends); err != nil {
		t.Fatal(err)
	}
	got = collect()
	if len(got) != 3 || len(got["ff_lease"]) != 1 || len(got["ff_completion"]) != 1 || len(got["ff_revoke"]) != 1 {
		t.Fatalf("cancelling 10 running executions notified %v, want one ff_lease, one ff_completion and one ff_revoke", got)
	}
	wantPartitions(t, "ff_lease", got["ff_lease"][0], xs)
	wantPartitions(t, "ff_completion", got["ff_completion"][0], xs)
	revoked := strings.Split(got["ff_revoke"][0], ",")
	slices.Sort(revoked)
	var want []string
	for _, x := range xs {
		want = append(want, strconv.Itoa(int(x.ID.Partition))+":"+x.ID.UUID.String()+":0")
	}
	slices.Sort(want)
	if !slices.Equal(revoked, want) {
		t.Fatalf("ff_revoke named %v, want %v (epoch 0: a cancel ends whichever attempt runs)", revoked, want)
	}
}

// wantPartitions fails t unless payload names exactly the partitions of
// xs.
func wantPartitions(t *testing.T, channel, payload string, xs []*ffdtype.Execution) {
	t.Helper()
	got, ok := store.ParsePartitions(payload)
	if !ok {
		t.Fatalf("%s payload %q is not a list of partitions", channel, payload)
	}
	var want []int16
	for _, x := range xs {
		if !slices.Contains(want, x.ID.Partition) {
			want = append(want, x.ID.Partition)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s named partitions %v, want %v", channel, got, want)
	}
}

// Lease timers that come due together cost one statement, however many
// there are and whether or not their leases ended already: a claim writes
// no lease event (migration 00018), so the timers come from the daemon's
// reload of the lease-expiry index and are re-checked in one batch.
func TestLeaseTimersDueTogetherCostOneStatement(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// A reload every second (ten sweep intervals, at least one second).
	d := f.startDaemon(daemon.Config{SweepInterval: 100 * time.Millisecond})
	const n = 20
	for range n {
		// Long enough that the handlers end, and their results are
		// recorded, before their first heartbeat (a third of the TTL): a
		// renewal would give each its own expiry. With 6 s the margin was
		// half a second, and one CI run (every package's tests at once)
		// counted two checks, most likely from results recorded that late.
		if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "timers", LeaseTTL: 12 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	// One claim takes all twenty (one statement: one now(), one expiry),
	// and they run across a reload.
	f.startWorker([]string{"timers"}, n, func(ctx context.Context, _ *ffd.Job) ([]byte, error) {
		time.Sleep(1500 * time.Millisecond)
		return nil, nil
	})
	f.WaitFor("every execution to complete", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == n
	})
	if started := f.Count(`SELECT count(DISTINCT attempt_started_at) FROM ff_execution WHERE lane = 'timers'`); started != 1 {
		t.Fatalf("claimed in %d statements, want 1 (the test needs one expiry for all)", started)
	}
	f.WaitFor("the lease timers to come due", func() bool {
		return labelValue(t, d.Metrics(), "ffd_lease_timers_total", "outcome", "checked") >= n
	})
	if checks := counterValue(t, d.Metrics(), "ffd_lease_checks_total"); checks != 1 {
		t.Fatalf("%v statements checked %d lease timers due together, want 1 (a heartbeat before a result was recorded, "+
			"a third of the TTL after the claim, would have given its lease an expiry of its own)", checks, n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'timers' AND state <> 'completed'`); n != 0 {
		t.Fatalf("%d executions changed by their stale timers", n)
	}
}
