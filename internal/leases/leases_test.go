package leases_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct{ *testdb.Fixture }

func setup(t *testing.T) *fixture { return &fixture{testdb.Checked(t, 2*time.Minute)} }

func (f *fixture) create(p ffdtype.CreateParams) *ffdtype.Execution {
	f.T.Helper()
	if p.Lane == "" {
		p.Lane = "default"
	}
	x, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil {
		f.T.Fatalf("create: %v", err)
	}
	return x
}

func (f *fixture) claim(lane string, n int, caps ...string) []*ffdtype.Execution {
	f.T.Helper()
	got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w1/i1", Capabilities: caps, Max: n})
	if err != nil {
		f.T.Fatalf("claim: %v", err)
	}
	return got
}

func (f *fixture) claimOne(lane string) *ffdtype.Execution {
	f.T.Helper()
	got := f.claim(lane, 1)
	if len(got) != 1 {
		f.T.Fatalf("claim from %s: got %d executions, want 1", lane, len(got))
	}
	return got[0]
}

func (f *fixture) get(id ffdtype.ExecutionID) *ffdtype.Execution {
	f.T.Helper()
	x, err := leases.Get(f.Ctx, f.Pool, id)
	if err != nil {
		f.T.Fatalf("get %s: %v", id, err)
	}
	return x
}

// snapshot renders everything the database holds about one execution, so
// that "changed nothing" can be checked exactly.
func (f *fixture) snapshot(id ffdtype.ExecutionID) string {
	f.T.Helper()
	var s string
	err := f.Pool.QueryRow(f.Ctx, `SELECT
		(SELECT row_to_json(e)::text FROM ff_execution e WHERE execution_id = $1) ||
		(SELECT coalesce(json_agg(a ORDER BY attempt), '[]')::text FROM ff_attempt a WHERE execution_id = $1) ||
		(SELECT coalesce(json_agg(l ORDER BY event_id), '[]')::text FROM ff_lease_event l WHERE execution_id = $1) ||
		(SELECT coalesce(json_agg(c ORDER BY event_id), '[]')::text FROM ff_completion_event c WHERE execution_id = $1)`,
		id.UUID).Scan(&s)
	if err != nil {
		f.T.Fatal(err)
	}
	return s
}

func (f *fixture) completionEvents(id ffdtype.ExecutionID) int {
	return f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1`, id.UUID)
}

// lapse makes a running lease look expired, as if its TTL had passed.
func (f *fixture) lapse(id ffdtype.ExecutionID) {
	f.Exec(`UPDATE ff_execution SET lease_expires_at = now() - interval '1 second' WHERE execution_id = $1`, id.UUID)
}

func TestCreateAndClaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.create(ffdtype.CreateParams{Lane: "mail", Kind: "send", Payload: []byte(`{"to":"a"}`), Tags: map[string]any{"team": "growth"}})
	if x.State != ffdtype.StatePending || x.Attempt != 0 || x.LeaseEpoch != 0 || x.StartedAt != nil {
		t.Fatalf("new execution: %+v; want pending, attempt 0, epoch 0, no started_at", x)
	}
	if x.ID.Partition != ident.Partition(x.ID.UUID) {
		t.Fatalf("solo execution on partition %d, want its uuid's %d", x.ID.Partition, ident.Partition(x.ID.UUID))
	}
	// Regression (original #356 area): the first claim sets state running.
	c := f.claimOne("mail")
	if c.ID != x.ID || c.State != ffdtype.StateRunning || c.Attempt != 1 || c.LeaseEpoch != 1 || c.LeaseOwner != "w1/i1" || c.StartedAt == nil || c.LeaseExpiresAt == nil {
		t.Fatalf("claimed: %+v; want running, attempt 1, epoch 1, owner w1/i1, started", c)
	}
	if string(c.Payload) != `{"to":"a"}` || c.Tags["team"] != "growth" {
		t.Fatalf("claimed payload %q tags %v", c.Payload, c.Tags)
	}
	// The claim wrote one row, the execution's: the open attempt is held
	// on it (migration 00018), and there is no acquired lease event.
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND attempt = 1 AND lease_epoch = 1 AND worker = 'w1/i1' AND outcome IS NULL AND ended_at IS NULL`, x.ID.UUID); n != 1 {
		t.Fatalf("want one open attempt, got %d", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt WHERE execution_id = $1`, x.ID.UUID) + f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1`, x.ID.UUID); n != 0 {
		t.Fatalf("the claim wrote %d attempt rows and lease events, want none", n)
	}
	if got := f.claim("mail", 5); len(got) != 0 {
		t.Fatalf("claimed a running execution again: %v", got)
	}
	exp, err := leases.Renew(f.Ctx, f.Pool, c.ID, c.LeaseEpoch)
	if err != nil || !exp.After(*c.LeaseExpiresAt) && !exp.Equal(*c.LeaseExpiresAt) {
		t.Fatalf("renew: %v, %v", exp, err)
	}
	out, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, c.ID, c.LeaseEpoch, []byte("done"))
	if err != nil || out.State != ffdtype.StateCompleted || out.Repeated {
		t.Fatalf("complete: %+v, %v", out, err)
	}
	done := f.get(x.ID)
	if done.State != ffdtype.StateCompleted || string(done.Result) != "done" || done.TerminalAt == nil || done.LeaseOwner != "" {
		t.Fatalf("after complete: %+v", done)
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'success'`, x.ID.UUID); n != 1 {
		t.Fatalf("want one success event, got %d", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND attempt = 1 AND outcome = 'succeeded' AND ended_at = $2`, x.ID.UUID, *done.TerminalAt); n != 1 {
		t.Fatalf("want the attempt ended as succeeded at the execution's end, got %d", n)
	}
	// Renewed is the one lease event a first-attempt success writes (it
	// renewed once above); released is no row any more.
	if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type <> 'renewed'`, x.ID.UUID); n != 0 {
		t.Fatalf("want no lease event but renewed, got %d", n)
	}
}

func TestDelayedNotClaimable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.create(ffdtype.CreateParams{Lane: "later", Delay: time.Hour})
	if got := f.claim("later", 1); len(got) != 0 {
		t.Fatalf("claimed an execution delayed by an hour")
	}
	f.Exec(`UPDATE ff_execution SET run_at = now() - interval '1 second' WHERE execution_id = $1`, x.ID.UUID)
	if got := f.claim("later", 1); len(got) != 1 {
		t.Fatalf("a due delayed execution was not claimable")
	}
}

func TestCompleteIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(ffdtype.CreateParams{})
	c := f.claimOne("default")
	first, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, c.ID, c.LeaseEpoch, []byte("r1"))
	if err != nil {
		t.Fatal(err)
	}
	before := f.snapshot(c.ID)
	again, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, c.ID, c.LeaseEpoch, []byte("r2"))
	if err != nil || !again.Repeated || again.State != ffdtype.StateCompleted || string(again.Result) != "r1" || again.Attempt != first.Attempt {
		t.Fatalf("repeated complete: %+v, %v; want the stored outcome r1", again, err)
	}
	if after := f.snapshot(c.ID); after != before {
		t.Fatalf("repeated complete wrote something:\nbefore %s\nafter  %s", before, after)
	}
	if n := f.completionEvents(c.ID); n != 1 {
		t.Fatalf("%d completion events, want 1", n)
	}
	// Failing an execution this lease completed is a lost lease, not a retry.
	if _, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: "x", Retryable: true}); !errors.Is(err, ffdtype.ErrLeaseLost) {
		t.Fatalf("fail after complete: %v, want lease lost", err)
	}
}

func TestFailIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(ffdtype.CreateParams{MaxAttempts: 1})
	c := f.claimOne("default")
	out, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: "boom", Retryable: true})
	if err != nil || out.State != ffdtype.StateFailed {
		t.Fatalf("fail on last attempt: %+v, %v; want failed", out, err)
	}
	before := f.snapshot(c.ID)
	again, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: "boom", Retryable: true})
	if err != nil || !again.Repeated || again.State != ffdtype.StateFailed {
		t.Fatalf("repeated fail: %+v, %v", again, err)
	}
	if after := f.snapshot(c.ID); after != before {
		t.Fatalf("repeated fail wrote something")
	}
	if n := f.completionEvents(c.ID); n != 1 {
		t.Fatalf("%d completion events, want 1", n)
	}
}

func TestIdempotencyKey(t *testing.T) {
	t.Parallel()
	f := setup(t)
	p := ffdtype.CreateParams{Lane: "l", IdempotencyKey: "order-42"}
	a, existedA, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil || existedA {
		t.Fatalf("first create: existed=%v err=%v", existedA, err)
	}
	b, existedB, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil || !existedB || b.ID != a.ID {
		t.Fatalf("second create: %v existed=%v err=%v; want %s existing", b.ID, existedB, err, a.ID)
	}
	// Another namespace is another key space.
	p.Namespace = "other"
	c, existedC, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil || existedC || c.ID == a.ID {
		t.Fatalf("create in other namespace: existed=%v err=%v", existedC, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE idempotency_key = 'order-42'`); n != 2 {
		t.Fatalf("%d executions with the key, want 2 (one per namespace)", n)
	}
}

// After expiry, revoke and cancel, the old holder can change nothing.
func TestFencing(t *testing.T) {
	t.Parallel()
	takeAway := map[string]func(f *fixture, x *ffdtype.Execution){
		"expiry": func(f *fixture, x *ffdtype.Execution) {
			f.lapse(x.ID)
			res, _, err := leases.ExpireLapsed(f.Ctx, f.Pool, []store.LeaseRef{{ID: x.ID, Epoch: x.LeaseEpoch}})
			if err != nil || res.LapsedRetried != 1 {
				f.T.Fatalf("expire: %+v %v", res, err)
			}
		},
		"revoke": func(f *fixture, x *ffdtype.Execution) {
			if _, err := leases.Revoke(f.Ctx, f.Pool, x.ID, "ops"); err != nil {
				f.T.Fatal(err)
			}
		},
		"cancel": func(f *fixture, x *ffdtype.Execution) {
			if _, err := leases.Cancel(f.Ctx, f.Pool, x.ID, "user asked", "alice"); err != nil {
				f.T.Fatal(err)
			}
		},
		"expiry then re-claim": func(f *fixture, x *ffdtype.Execution) {
			f.lapse(x.ID)
			if _, err := leases.SweepLapsed(f.Ctx, f.Pool, 10); err != nil {
				f.T.Fatal(err)
			}
			f.Exec(`UPDATE ff_execution SET run_at = now() WHERE execution_id = $1`, x.ID.UUID)
			if got := f.claim("fence", 1); len(got) != 1 {
				f.T.Fatal("re-claim failed")
			}
		},
	}
	for name, take := range takeAway {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.create(ffdtype.CreateParams{Lane: "fence"})
			x := f.claimOne("fence")
			take(f, x)
			after := f.get(x.ID)
			if after.LeaseEpoch <= x.LeaseEpoch {
				t.Fatalf("epoch %d after %s, want > %d", after.LeaseEpoch, name, x.LeaseEpoch)
			}
			before := f.snapshot(x.ID)
			if _, err := leases.Renew(f.Ctx, f.Pool, x.ID, x.LeaseEpoch); !errors.Is(err, ffdtype.ErrLeaseLost) {
				t.Errorf("renew by old holder: %v, want lease lost", err)
			}
			if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, []byte("late")); !errors.Is(err, ffdtype.ErrLeaseLost) {
				t.Errorf("complete by old holder: %v, want lease lost", err)
			}
			for _, retry := range []bool{true, false} {
				if _, err := leases.Fail(f.Ctx, f.Pool, x.ID, x.LeaseEpoch, ffdtype.FailParams{Error: "late", Retryable: retry}); !errors.Is(err, ffdtype.ErrLeaseLost) {
					t.Errorf("fail(retryable=%v) by old holder: %v, want lease lost", retry, err)
				}
			}
			var lost *ffdtype.LeaseLostError
			_, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil)
			if !errors.As(err, &lost) || lost.Epoch != x.LeaseEpoch || lost.CurrentEpoch != after.LeaseEpoch {
				t.Errorf("lease lost error %v does not carry the epochs %d and %d", err, x.LeaseEpoch, after.LeaseEpoch)
			}
			if got := f.snapshot(x.ID); got != before {
				t.Fatalf("the old holder changed something:\nbefore %s\nafter  %s", before, got)
			}
		})
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pending := f.create(ffdtype.CreateParams{Lane: "c"})
	out, err := leases.Cancel(f.Ctx, f.Pool, pending.ID, "", "")
	if err != nil || out.State != ffdtype.StateCancelled || out.Repeated {
		t.Fatalf("cancel pending: %+v %v", out, err)
	}
	got := f.get(pending.ID)
	if got.CancellationReason != leases.DefaultCancelReason || got.CancelledBy != leases.DefaultCancelledBy || got.LeaseEpoch != 0 {
		t.Fatalf("cancelled pending: %+v", got)
	}
	again, err := leases.Cancel(f.Ctx, f.Pool, pending.ID, "x", "y")
	if err != nil || !again.Repeated {
		t.Fatalf("repeated cancel: %+v %v; want a no-op success", again, err)
	}
	if n := f.completionEvents(pending.ID); n != 1 {
		t.Fatalf("%d completion events after two cancels, want 1", n)
	}

	f.create(ffdtype.CreateParams{Lane: "c"})
	running := f.claimOne("c")
	if _, err := leases.Cancel(f.Ctx, f.Pool, running.ID, "stop", "ops"); err != nil {
		t.Fatal(err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'revoked' AND lease_epoch = $2`, running.ID.UUID, running.LeaseEpoch); n != 1 {
		t.Fatalf("cancel of running: %d revoked lease events, want 1", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND outcome = 'cancelled'`, running.ID.UUID); n != 1 {
		t.Fatalf("cancel of running: attempt not closed as cancelled")
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'cancelled'`, running.ID.UUID); n != 1 {
		t.Fatalf("cancel of running: %d cancelled events, want 1", n)
	}

	f.create(ffdtype.CreateParams{Lane: "c"})
	done := f.claimOne("c")
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, done.ID, done.LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
	var term *ffdtype.AlreadyTerminalError
	if _, err := leases.Cancel(f.Ctx, f.Pool, done.ID, "", ""); !errors.As(err, &term) || term.State != "completed" {
		t.Fatalf("cancel of completed: %v, want already terminal naming completed", err)
	}
	// A terminal execution is never claimed again.
	if got := f.claim("c", 10); len(got) != 0 {
		t.Fatalf("claimed terminal executions: %d", len(got))
	}
}

func TestRevoke(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.create(ffdtype.CreateParams{Lane: "r"})
	if _, err := leases.Revoke(f.Ctx, f.Pool, x.ID, ""); !errors.Is(err, ffdtype.ErrConflict) {
		t.Fatalf("revoke of pending: %v, want conflict", err)
	}
	c := f.claimOne("r")
	rq, err := leases.Revoke(f.Ctx, f.Pool, c.ID, "drain node")
	if err != nil || rq.LeaseEpoch != c.LeaseEpoch+1 {
		t.Fatalf("revoke: %+v %v", rq, err)
	}
	got := f.get(c.ID)
	if got.State != ffdtype.StatePending || got.LeaseOwner != "" {
		t.Fatalf("after revoke: %+v", got)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND outcome = 'revoked'`, c.ID.UUID); n != 1 {
		t.Fatal("attempt not closed as revoked")
	}
	if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'revoked'`, c.ID.UUID); n != 1 {
		t.Fatal("no revoked lease event")
	}
	if n := f.completionEvents(c.ID); n != 0 {
		t.Fatalf("revoke wrote %d completion events", n)
	}
	again := f.claimOne("r")
	if again.Attempt != 2 || again.LeaseEpoch != c.LeaseEpoch+2 {
		t.Fatalf("re-claim after revoke: attempt %d epoch %d", again.Attempt, again.LeaseEpoch)
	}
}

// Executions that fail together come back spread over the jitter's
// window, each within it: the draw is a hash of the execution and its
// attempt, different for each.
func TestRetryJitterSpreads(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 40
	for range n {
		f.create(ffdtype.CreateParams{Lane: "spread", Retry: ffdtype.RetryPolicy{Base: 100 * time.Second, Jitter: 0.5, Max: time.Hour}})
	}
	var dbNow time.Time
	f.Pool.QueryRow(f.Ctx, `SELECT now()`).Scan(&dbNow)
	seen := map[time.Time]bool{}
	for _, c := range f.claim("spread", n) {
		out, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: "e", Retryable: true})
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := dbNow.Add(49*time.Second), dbNow.Add(151*time.Second); out.RunAt.Before(lo) || out.RunAt.After(hi) {
			t.Fatalf("run_at %v outside [%v, %v]: 100 s ± 50%%", out.RunAt, lo, hi)
		}
		seen[out.RunAt.Truncate(time.Second)] = true
	}
	if len(seen) < n/4 {
		t.Fatalf("%d executions failing together came back in %d distinct seconds of a 100-second window, want them spread", n, len(seen))
	}
}

func TestRetries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.create(ffdtype.CreateParams{Lane: "retry", MaxAttempts: 3, Retry: ffdtype.RetryPolicy{Base: 10 * time.Second, Multiplier: 3, Jitter: 0.1, Max: time.Minute}})
	firstStart := time.Time{}
	for attempt := 1; attempt <= 3; attempt++ {
		c := f.claimOne("retry")
		if attempt == 1 {
			firstStart = *c.StartedAt
		}
		if c.StartedAt == nil || !c.StartedAt.Equal(firstStart) {
			t.Fatalf("attempt %d: started_at %v, want it set once at %v", attempt, c.StartedAt, firstStart)
		}
		var dbNow time.Time
		f.Pool.QueryRow(f.Ctx, `SELECT now()`).Scan(&dbNow)
		out, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: fmt.Sprint("boom ", attempt), Retryable: true})
		if err != nil {
			t.Fatal(err)
		}
		if attempt == 3 {
			if out.State != ffdtype.StateFailed {
				t.Fatalf("last attempt: %+v, want failed", out)
			}
			break
		}
		// min(10s * 3^(n-1), 1m) ± 10%
		base := min(10*time.Second*time.Duration(pow(3, attempt-1)), time.Minute)
		lo, hi := dbNow.Add(base*9/10-time.Second), dbNow.Add(base*11/10+time.Second)
		if out.State != ffdtype.StatePending || out.RunAt.Before(lo) || out.RunAt.After(hi) {
			t.Fatalf("attempt %d: %v run_at %v, want pending within [%v, %v]", attempt, out.State, out.RunAt, lo, hi)
		}
		if got := f.claim("retry", 1); len(got) != 0 {
			t.Fatalf("attempt %d: claimable during backoff", attempt)
		}
		f.Exec(`UPDATE ff_execution SET run_at = now() WHERE execution_id = $1`, x.ID.UUID)
	}
	final := f.get(x.ID)
	if final.State != ffdtype.StateFailed || final.Attempt != 3 || final.LastError != "boom 3" || !final.StartedAt.Equal(firstStart) {
		t.Fatalf("final: %+v", final)
	}
	if n := f.completionEvents(x.ID); n != 1 {
		t.Fatalf("%d completion events, want 1", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND outcome = 'failed'`, x.ID.UUID); n != 3 {
		t.Fatalf("%d failed attempts, want 3", n)
	}

	// Not retryable: failed at once, attempts left or not.
	y := f.create(ffdtype.CreateParams{Lane: "perm", MaxAttempts: 5})
	c := f.claimOne("perm")
	out, err := leases.Fail(f.Ctx, f.Pool, c.ID, c.LeaseEpoch, ffdtype.FailParams{Error: "bad input"})
	if err != nil || out.State != ffdtype.StateFailed || f.completionEvents(y.ID) != 1 {
		t.Fatalf("non-retryable fail: %+v %v", out, err)
	}
}

func pow(b, e int) int {
	r := 1
	for range e {
		r *= b
	}
	return r
}

func TestLapseRetriesThenExpires(t *testing.T) {
	t.Parallel()
	f := setup(t)
	x := f.create(ffdtype.CreateParams{Lane: "lapse", MaxAttempts: 2, Retry: ffdtype.RetryPolicy{Base: time.Millisecond}})
	c := f.claimOne("lapse")
	f.lapse(c.ID)
	res, err := leases.SweepLapsed(f.Ctx, f.Pool, 100)
	if err != nil || res.Retried != 1 || res.Terminated != 0 || res.LapsedRetried != 1 {
		t.Fatalf("first sweep: %+v %v; want one lapsed lease retried", res, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt_all WHERE execution_id = $1 AND outcome = 'timed_out'`, x.ID.UUID); n != 1 {
		t.Fatal("attempt not timed_out")
	}
	time.Sleep(5 * time.Millisecond)
	c2 := f.claimOne("lapse")
	// Attempt timeout with heartbeats: attempt_deadline_at passed.
	f.Exec(`UPDATE ff_execution SET attempt_deadline_at = now() - interval '1 second' WHERE execution_id = $1`, x.ID.UUID)
	if res, _, err := leases.ExpireLapsed(f.Ctx, f.Pool, []store.LeaseRef{{ID: c2.ID, Epoch: c.LeaseEpoch}}); err != nil || res != (leases.Expired{}) {
		t.Fatalf("expire at a stale epoch: %+v err=%v; want nothing", res, err)
	}
	res2, ended, err := leases.ExpireLapsed(f.Ctx, f.Pool, []store.LeaseRef{{ID: c2.ID, Epoch: c2.LeaseEpoch}})
	if err != nil || res2.TimeoutExpired != 1 || res2.Terminated != 1 || len(ended) != 1 || ended[0] != c2.ID {
		t.Fatalf("expire: %+v %v %v; want one attempt timeout ending the execution %s", res2, ended, err, c2.ID)
	}
	got := f.get(x.ID)
	if got.State != ffdtype.StateExpired || got.LeaseEpoch != c2.LeaseEpoch+1 || got.LastError != "attempt timed out" {
		t.Fatalf("after last attempt timed out: %+v", got)
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'expired'`, x.ID.UUID); n != 1 {
		t.Fatal("no expired completion event")
	}
	if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'expired'`, x.ID.UUID); n != 2 {
		t.Fatalf("%d expired lease events, want 2", n)
	}
}

func TestDeadline(t *testing.T) {
	t.Parallel()
	f := setup(t)
	pending := f.create(ffdtype.CreateParams{Lane: "dl", Deadline: time.Hour})
	f.create(ffdtype.CreateParams{Lane: "dl", Deadline: time.Hour})
	running := f.claim("dl", 2)[1]
	f.create(ffdtype.CreateParams{Lane: "dl"}) // no deadline: untouched
	f.Exec(`UPDATE ff_execution SET deadline_at = now() - interval '1 second' WHERE deadline_at IS NOT NULL`)
	n, err := leases.SweepDeadlines(f.Ctx, f.Pool, 100)
	if err != nil || n != 2 {
		t.Fatalf("sweep deadlines: %d %v; want 2", n, err)
	}
	for _, id := range []ffdtype.ExecutionID{pending.ID, running.ID} {
		if got := f.get(id); got.State != ffdtype.StateExpired {
			t.Fatalf("%s: %s, want expired", id, got.State)
		}
	}
	if f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'pending'`) != 1 {
		t.Fatal("the execution without a deadline was touched")
	}
}

func TestPriorityThenRunAt(t *testing.T) {
	t.Parallel()
	f := setup(t)
	low := f.create(ffdtype.CreateParams{Lane: "o", Priority: 1})
	highLate := f.create(ffdtype.CreateParams{Lane: "o", Priority: 5})
	highEarly := f.create(ffdtype.CreateParams{Lane: "o", Priority: 5})
	f.Exec(`UPDATE ff_execution SET run_at = now() - interval '1 minute' WHERE execution_id = $1`, highEarly.ID.UUID)
	got := f.claim("o", 3)
	want := []ffdtype.ExecutionID{highEarly.ID, highLate.ID, low.ID}
	for i := range want {
		if got[i].ID != want[i] {
			t.Fatalf("claim order position %d: %s, want %s", i, got[i].ID, want[i])
		}
	}
}

func TestCapabilities(t *testing.T) {
	t.Parallel()
	f := setup(t)
	// The head of the lane needs a capability nobody has.
	f.create(ffdtype.CreateParams{Lane: "gpu", Priority: 100, RequiredCapabilities: []string{"gpu", "a100"}})
	plain := f.create(ffdtype.CreateParams{Lane: "gpu"})
	partial := f.create(ffdtype.CreateParams{Lane: "gpu", Priority: 50, RequiredCapabilities: []string{"gpu"}})
	got := f.claim("gpu", 10, "gpu", "cpu")
	if len(got) != 2 || got[0].ID != partial.ID || got[1].ID != plain.ID {
		t.Fatalf("claimed %d executions; want the gpu one then the plain one past the unmatchable head", len(got))
	}
}

// 8 claimers with batch claims take 2,000 executions: each exactly once.
func TestConcurrentClaims(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const total = 2000
	f.Exec(`INSERT INTO ff_execution (partition_key, execution_id, lane, state)
		SELECT 0, gen_random_uuid(), 'busy', 'pending' FROM generate_series(1, $1)`, total)
	var (
		mu   sync.Mutex
		seen = map[ffdtype.ExecutionID]int{}
		wg   sync.WaitGroup
		errs = make(chan error, 8)
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "busy", Worker: fmt.Sprintf("w%d/1", w), Max: 25})
				if err != nil {
					errs <- err
					return
				}
				if len(got) == 0 {
					return
				}
				for _, x := range got {
					if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil); err != nil {
						errs <- err
						return
					}
				}
				mu.Lock()
				for _, x := range got {
					seen[x.ID]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(seen) != total {
		t.Fatalf("claimed %d distinct executions, want %d", len(seen), total)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("%s claimed %d times", id, n)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_completion_event`); n != total {
		t.Fatalf("%d completion events, want %d", n, total)
	}
}

func TestTransactionalCreateRollback(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tx, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	x, _, err := leases.Create(f.Ctx, tx, leases.Limits{}, ffdtype.CreateParams{Lane: "tx"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Get(f.Ctx, f.Pool, x.ID); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("rolled-back execution found: %v", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution`); n != 0 {
		t.Fatalf("%d executions after rollback, want 0", n)
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t)
	big := make([]byte, leases.DefaultMaxPayloadBytes+1)
	tests := []struct {
		name  string
		p     ffdtype.CreateParams
		field string
	}{
		{"no lane", ffdtype.CreateParams{}, "lane"},
		{"lane with space", ffdtype.CreateParams{Lane: "a b"}, "lane"},
		{"lane too long", ffdtype.CreateParams{Lane: strings.Repeat("x", 129)}, "lane"},
		{"namespace", ffdtype.CreateParams{Lane: "l", Namespace: "ns/1"}, "namespace"},
		{"payload too large", ffdtype.CreateParams{Lane: "l", Payload: big}, "payload"},
		{"max attempts negative", ffdtype.CreateParams{Lane: "l", MaxAttempts: -1}, "max_attempts"},
		{"max attempts absurd", ffdtype.CreateParams{Lane: "l", MaxAttempts: 1_000_000}, "max_attempts"},
		{"ttl negative", ffdtype.CreateParams{Lane: "l", LeaseTTL: -time.Second}, "lease_ttl"},
		{"ttl too short", ffdtype.CreateParams{Lane: "l", LeaseTTL: time.Millisecond}, "lease_ttl"},
		{"ttl absurd", ffdtype.CreateParams{Lane: "l", LeaseTTL: 1000 * time.Hour}, "lease_ttl"},
		{"attempt timeout negative", ffdtype.CreateParams{Lane: "l", AttemptTimeout: -1}, "attempt_timeout"},
		{"attempt timeout absurd", ffdtype.CreateParams{Lane: "l", AttemptTimeout: 10000 * time.Hour}, "attempt_timeout"},
		{"delay negative", ffdtype.CreateParams{Lane: "l", Delay: -time.Second}, "delay"},
		{"deadline negative", ffdtype.CreateParams{Lane: "l", Deadline: -time.Second}, "deadline"},
		{"backoff multiplier", ffdtype.CreateParams{Lane: "l", Retry: ffdtype.RetryPolicy{Multiplier: 0.5}}, "retry.multiplier"},
		{"backoff jitter", ffdtype.CreateParams{Lane: "l", Retry: ffdtype.RetryPolicy{Jitter: 3}}, "retry.jitter"},
		{"backoff max below base", ffdtype.CreateParams{Lane: "l", Retry: ffdtype.RetryPolicy{Base: time.Minute, Max: time.Second}}, "retry.max"},
		{"empty capability", ffdtype.CreateParams{Lane: "l", RequiredCapabilities: []string{""}}, "required_capabilities"},
		{"idempotency key too long", ffdtype.CreateParams{Lane: "l", IdempotencyKey: strings.Repeat("k", 513)}, "idempotency_key"},
		{"tags not JSON", ffdtype.CreateParams{Lane: "l", Tags: map[string]any{"f": func() {}}}, "tags"},
	}
	for _, tt := range tests {
		_, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, tt.p)
		var ve *ffdtype.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, ffdtype.ErrValidation) {
			t.Errorf("%s: got %v, want a validation error on %s", tt.name, err, tt.field)
		}
	}
	claims := []struct {
		name  string
		p     ffdtype.ClaimParams
		field string
	}{
		{"claim zero", ffdtype.ClaimParams{Lane: "l", Worker: "w", Max: 0}, "max"},
		{"claim too many", ffdtype.ClaimParams{Lane: "l", Worker: "w", Max: 5000}, "max"},
		{"claim no worker", ffdtype.ClaimParams{Lane: "l", Max: 1}, "worker"},
		{"claim bad lane", ffdtype.ClaimParams{Lane: "", Worker: "w", Max: 1}, "lane"},
	}
	for _, tt := range claims {
		_, err := leases.Claim(f.Ctx, f.Pool, tt.p)
		var ve *ffdtype.ValidationError
		if !errors.As(err, &ve) || ve.Field != tt.field {
			t.Errorf("%s: got %v, want a validation error on %s", tt.name, err, tt.field)
		}
	}
	if _, err := leases.List(f.Ctx, f.Pool, ffdtype.ListParams{State: "waiting"}); !errors.Is(err, ffdtype.ErrValidation) {
		t.Errorf("list by unknown state: %v", err)
	}
	if n := f.Count(`SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_lease_event)`); n != 0 {
		t.Fatalf("bad input wrote %d rows", n)
	}
	missing := ident.NewExecutionID()
	if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, missing, 1, nil); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Errorf("complete of a missing execution: %v, want not found", err)
	}
	if _, err := leases.Cancel(f.Ctx, f.Pool, missing, "", ""); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Errorf("cancel of a missing execution: %v, want not found", err)
	}
}

func TestList(t *testing.T) {
	t.Parallel()
	f := setup(t)
	var ids []ffdtype.ExecutionID
	for i := range 25 {
		lane := "even"
		if i%2 == 1 {
			lane = "odd"
		}
		ids = append(ids, f.create(ffdtype.CreateParams{Lane: lane}).ID)
	}
	var got []ffdtype.ExecutionID
	var after *ffdtype.ExecutionID
	pages := 0
	for {
		page, err := leases.List(f.Ctx, f.Pool, ffdtype.ListParams{Lane: "even", After: after, Limit: 5})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, x := range page.Executions {
			got = append(got, x.ID)
		}
		if page.Next == nil {
			break
		}
		after = page.Next
	}
	if len(got) != 13 || pages != 3 {
		t.Fatalf("listed %d even executions in %d pages, want 13 in 3", len(got), pages)
	}
	for i, id := range got {
		if id != ids[2*i] {
			t.Fatalf("position %d: %s, want %s (creation order)", i, id, ids[2*i])
		}
	}
	// A page larger than the maximum is refused, not silently shortened.
	if _, err := leases.List(f.Ctx, f.Pool, ffdtype.ListParams{State: ffdtype.StatePending, Limit: 100000}); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("list with a limit over the maximum: %v, want a ValidationError", err)
	}
	page, err := leases.List(f.Ctx, f.Pool, ffdtype.ListParams{State: ffdtype.StatePending, Limit: leases.MaxListLimit})
	if err != nil || len(page.Executions) != 25 {
		t.Fatalf("list pending with the largest limit: %d, %v", len(page.Executions), err)
	}
}

// Cancels racing claims: whichever wins, no attempt is left open and every
// cancelled execution has one event (the invariant check at cleanup).
func TestCancelRacesClaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 300
	var ids []ffdtype.ExecutionID
	for range n {
		ids = append(ids, f.create(ffdtype.CreateParams{Lane: "race"}).ID)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for {
				got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: "race", Worker: fmt.Sprintf("w%d/1", w), Max: 3})
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if _, err := leases.Cancel(f.Ctx, f.Pool, ids[i], "race", "test"); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if got := f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'cancelled'`); got != n {
		t.Fatalf("%d cancelled, want %d", got, n)
	}
}

// A batch of completions commits together; a stale epoch in the batch
// fails only its own item.
func TestCompleteMany(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for range 5 {
		f.create(ffdtype.CreateParams{Lane: "many"})
	}
	xs := f.claim("many", 5)
	items := make([]leases.Completion, len(xs))
	for i, x := range xs {
		items[i] = leases.Completion{ID: x.ID, Epoch: x.LeaseEpoch, Result: []byte(fmt.Sprint(i))}
	}
	items[2].Epoch = 99 // a holder that lost its lease
	outs, errs, err := leases.CompleteMany(f.Ctx, f.Pool, leases.Limits{}, items, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range items {
		if i == 2 {
			if !errors.Is(errs[i], ffdtype.ErrLeaseLost) {
				t.Fatalf("stale item: %v, want lease lost", errs[i])
			}
			continue
		}
		if errs[i] != nil || outs[i].State != ffdtype.StateCompleted {
			t.Fatalf("item %d: %+v %v", i, outs[i], errs[i])
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE state = 'completed'`); n != 4 {
		t.Fatalf("%d completed, want 4", n)
	}
	// Repeating the batch: idempotent, nothing new written.
	before := f.Count(`SELECT count(*) FROM ff_completion_event`)
	outs, errs, err = leases.CompleteMany(f.Ctx, f.Pool, leases.Limits{}, items, 0)
	if err != nil || !outs[0].Repeated || errs[0] != nil || f.Count(`SELECT count(*) FROM ff_completion_event`) != before {
		t.Fatalf("repeat: %+v %v %v", outs[0], errs[0], err)
	}
}

// cancelAfterBatch is a tracer that ends a context once a pipelined
// batch (a renewal with its notice) has run: the statements after it in
// the same call fail as a read that timed out under load does.
type cancelAfterBatch struct{ cancel context.CancelFunc }

func (c *cancelAfterBatch) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (c *cancelAfterBatch) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *cancelAfterBatch) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *cancelAfterBatch) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *cancelAfterBatch) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {
	c.cancel()
}

// A renewal that matched nothing is a lost lease even when the read that
// says why fails: the caller (a heartbeat) must stop, not retry.
func TestRenewLostWithoutItsReason(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(ffdtype.CreateParams{Lane: "unread"})
	x := f.claimOne("unread")
	if _, err := leases.Revoke(f.Ctx, f.Pool, x.ID, "ops"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(f.DB.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	defer cancel()
	cfg.ConnConfig.Tracer = &cancelAfterBatch{cancel: cancel}
	pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pool.Ping(f.Ctx); err != nil {
		t.Fatal(err)
	}
	_, err = leases.Renew(ctx, pool, x.ID, x.LeaseEpoch)
	var lost *ffdtype.LeaseLostError
	if !errors.As(err, &lost) || !errors.Is(err, ffdtype.ErrLeaseLost) || lost.Unread == nil || !errors.Is(lost.Unread, context.Canceled) {
		t.Fatalf("renew of a revoked lease whose state could not be read: %v; want a lost lease that says the read failed", err)
	}
	if !strings.Contains(err.Error(), "could not be read") {
		t.Errorf("error %q does not say the state went unread", err)
	}
}
