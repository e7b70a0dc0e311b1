package daemon_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/leases"
)

// One statement sends one notification per outbox (and per lane it made
// work claimable in), whatever the number of rows it wrote: a claim of 50 one ff_lease covering their 50 lease
// events; their completion in one batch one ff_lease and one empty
// ff_completion (solo events are born dispatched); a statement that wrote
// nothing sends nothing.
func TestOneNotificationPerStatement(t *testing.T) {
	t.Parallel()
	f := setup(t)
	conn, err := pgx.Connect(f.Ctx, f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(f.Ctx, `LISTEN ff_lease; LISTEN ff_completion; LISTEN ff_ready`); err != nil {
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
	ps := make([]leases.CreateParams, 60)
	for i := range ps {
		ps[i] = leases.CreateParams{Lane: "batch"}
		if i >= 50 {
			ps[i] = leases.CreateParams{Lane: "later", Delay: time.Hour}
		}
	}
	if _, err := leases.CreateMany(f.Ctx, f.DB.Pool, leases.Limits{}, ps); err != nil {
		t.Fatal(err)
	}
	if got := collect(); len(got) != 1 || len(got["ff_ready"]) != 1 || got["ff_ready"][0] != "batch" {
		t.Fatalf("a batch create notified %v, want one ff_ready for lane batch", got)
	}
	xs, err := leases.Claim(f.Ctx, f.DB.Pool, leases.ClaimParams{Lane: "batch", Worker: "w/1", Max: 50})
	if err != nil || len(xs) != 50 {
		t.Fatalf("claimed %d of 50: %v", len(xs), err)
	}
	got := collect()
	if len(got["ff_lease"]) != 1 || len(got["ff_completion"]) != 0 {
		t.Fatalf("a claim of 50 notified %v, want one ff_lease", got)
	}
	lo, hi, ok := strings.Cut(got["ff_lease"][0], "-")
	a, _ := strconv.Atoi(lo)
	b, _ := strconv.Atoi(hi)
	if !ok || b-a+1 < 50 {
		t.Fatalf("ff_lease payload %q does not cover 50 events", got["ff_lease"][0])
	}
	items := make([]leases.Completion, len(xs))
	for i, x := range xs {
		items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch}
	}
	if _, errs, err := leases.CompleteMany(f.Ctx, f.DB.Pool, leases.Limits{}, items, 0); err != nil {
		t.Fatal(err)
	} else {
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
	}
	got = collect()
	if len(got["ff_lease"]) != 1 || len(got["ff_completion"]) != 1 || got["ff_completion"][0] != "" {
		t.Fatalf("completing 50 solo executions notified %v, want one ff_lease and one empty ff_completion", got)
	}
	// Fenced out (a stale epoch): the statement writes no event and sends
	// nothing.
	stale := []leases.Completion{{ID: items[0].ID, Epoch: items[0].Epoch + 5}}
	if _, errs, err := leases.CompleteMany(f.Ctx, f.DB.Pool, leases.Limits{}, stale, 0); err != nil {
		t.Fatal(err)
	} else if errs[0] == nil {
		t.Fatal("a completion at a stale epoch was not refused")
	}
	if got := collect(); len(got) != 0 {
		t.Fatalf("a statement that wrote no event notified %v", got)
	}
}

// A lease that ended before its expiry (the execution completed) costs the
// daemon no query when its timer comes due: the release dropped the timer.
func TestEndedLeaseTimersCostNoQuery(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.startDaemon(daemon.Config{})
	const n = 20
	for range n {
		if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "timers", LeaseTTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	f.startWorker([]string{"timers"}, n, func(ctx context.Context, _ *ffd.Job) ([]byte, error) {
		time.Sleep(300 * time.Millisecond) // long enough for the daemon to load the lease's timer
		return nil, nil
	})
	f.WaitFor("every execution to complete", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`) == n
	})
	// Every lease's expiry (claim + 1 s) has come by then.
	f.WaitFor("the lease timers to come due", func() bool {
		return counterValue(t, d.Metrics(), "ffd_lease_timers_total") >= n
	})
	if checked := labelValue(t, d.Metrics(), "ffd_lease_timers_total", "outcome", "checked"); checked != 0 {
		t.Fatalf("%v lease timers of completed executions were checked with a query, want 0", checked)
	}
}
