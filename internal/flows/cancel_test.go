package flows_test

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// everyState builds a flow with a member in every state and returns them
// by state name, and the running member's lease epoch.
func (f *fixture) everyState() (*ffdtype.Flow, map[string]ffdtype.ExecutionID, int64) {
	f.T.Helper()
	fl := f.flow()
	m := map[string]ffdtype.ExecutionID{}
	for _, name := range []string{"blocker", "blocked", "pending", "running", "completed", "failed", "retrying"} {
		m[name] = f.member(fl)
	}
	f.link(fl, m["blocker"], m["blocked"])
	f.runAndEnd(m["completed"], true)
	f.runAndEnd(m["failed"], false)
	// retrying: one failed attempt, back to pending after backoff.
	x, _ := leases.Get(f.Ctx, f.Pool, m["retrying"])
	got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: x.Lane, Worker: "w/1", Max: 1})
	if err != nil || len(got) != 1 {
		f.T.Fatal(err)
	}
	if out, err := leases.Fail(f.Ctx, f.Pool, got[0].ID, got[0].LeaseEpoch, ffdtype.FailParams{Error: "flaky", Retryable: true}); err != nil || out.State != ffdtype.StatePending {
		f.T.Fatalf("retrying member: %+v %v", out, err)
	}
	x, _ = leases.Get(f.Ctx, f.Pool, m["running"])
	got, err = leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: x.Lane, Worker: "w/1", Max: 1})
	if err != nil || len(got) != 1 {
		f.T.Fatal(err)
	}
	return fl, m, got[0].LeaseEpoch
}

func TestCancelFlow(t *testing.T) {
	t.Parallel()
	tests := []struct {
		policy    ffdtype.CancelPolicy
		cancelled []string
	}{
		{ffdtype.CancelFlowOnly, nil},
		{ffdtype.CancelAll, []string{"blocker", "blocked", "pending", "running", "retrying"}},
		{ffdtype.CancelPending, []string{"blocker", "blocked", "pending", "retrying"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.policy), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			fl, m, runningEpoch := f.everyState()
			running, err := leases.Get(f.Ctx, f.Pool, m["running"])
			if err != nil || running.LeaseExpiresAt == nil {
				t.Fatalf("running member: %+v %v", running, err)
			}
			states := map[string]ffdtype.State{}
			for name, id := range m {
				states[name] = f.state(id)
			}
			res, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, tt.policy, "")
			if err != nil || res.Repeated || res.Policy != tt.policy {
				t.Fatalf("cancel: %+v %v", res, err)
			}
			want := map[ffdtype.ExecutionID]bool{}
			for _, name := range tt.cancelled {
				want[m[name]] = true
			}
			if len(res.Members) != len(want) {
				t.Fatalf("cancelled %d members, want %d", len(res.Members), len(want))
			}
			for _, id := range res.Members {
				if !want[id] {
					t.Fatalf("cancelled %s, which the policy spares", id)
				}
			}
			for name, id := range m {
				got := f.state(id)
				if want[id] && got != ffdtype.StateCancelled {
					t.Errorf("%s member is %s, want cancelled", name, got)
				}
				if !want[id] && got != states[name] {
					t.Errorf("%s member went from %s to %s, want untouched", name, states[name], got)
				}
				events := f.Count(`SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = 'cancelled'`, id.UUID)
				if want[id] != (events == 1) {
					t.Errorf("%s member has %d cancelled events", name, events)
				}
			}
			if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id = $1 AND execution_id IS NULL AND outcome = 'cancelled'`, fl.ID); n != 1 {
				t.Fatalf("%d flow cancelled events, want 1", n)
			}
			// No cancelled member keeps an open or "retry" attempt.
			if n := f.Count(`SELECT count(*) FROM ff_attempt_all a JOIN ff_execution e USING (partition_key, execution_id)
				WHERE e.flow_id = $1 AND e.state = 'cancelled' AND (a.outcome IS NULL OR a.outcome NOT IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'revoked'))`, fl.ID); n != 0 {
				t.Fatalf("%d stale attempts on cancelled members", n)
			}
			// The running member: fenced under cancel_all, free to finish
			// otherwise; either way the flow stays cancelled.
			_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, m["running"], runningEpoch, []byte("late"))
			if tt.policy == ffdtype.CancelAll {
				if !errors.Is(err, ffdtype.ErrLeaseLost) {
					t.Fatalf("complete by a fenced member: %v, want lease lost", err)
				}
				// Of the lease taken away: its epoch, and the expiry it had.
				if n := f.Count(`SELECT count(*) FROM ff_lease_event WHERE execution_id = $1 AND event_type = 'revoked'
					AND lease_epoch = $2 AND lease_expires_at = $3`, m["running"].UUID, runningEpoch, *running.LeaseExpiresAt); n != 1 {
					t.Fatalf("%d revoked lease events for the running member at epoch %d, expiring %s; want 1", n, runningEpoch, running.LeaseExpiresAt)
				}
				if x, err := leases.Get(f.Ctx, f.Pool, m["running"]); err != nil || x.LeaseEpoch != runningEpoch+1 {
					t.Fatalf("the cancelled running member: %+v %v; want its epoch bumped to %d", x, err, runningEpoch+1)
				}
			} else if err != nil {
				t.Fatalf("complete by a running member the policy spared: %v", err)
			}
			// Idempotent repeat, whatever policy it names.
			before := f.Count(`SELECT count(*) FROM ff_completion_event`)
			again, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, ffdtype.CancelAll, "again")
			if err != nil || !again.Repeated || again.Policy != tt.policy || fmt.Sprint(sorted(again.Members)) != fmt.Sprint(sorted(res.Members)) {
				t.Fatalf("repeat: %+v %v; want the stored policy %s and members", again, err, tt.policy)
			}
			if after := f.Count(`SELECT count(*) FROM ff_completion_event`); after != before {
				t.Fatalf("repeat wrote %d events", after-before)
			}
			fl2, err := flows.Get(f.Ctx, f.Pool, fl.ID)
			if err != nil || fl2.State != ffdtype.FlowCancelled || fl2.CancellationPolicy != tt.policy {
				t.Fatalf("flow after cancel: %+v %v", fl2, err)
			}
		})
	}
}

func sorted(ids []ffdtype.ExecutionID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	sort.Strings(out)
	return out
}

func TestCancelFlowRefusals(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := flows.Cancel(f.Ctx, f.Pool, ident.NewUUID(), ffdtype.CancelAll, ""); !errors.Is(err, ffdtype.ErrNotFound) {
		t.Fatalf("missing flow: %v", err)
	}
	fl := f.flow()
	if _, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, "everything", ""); !errors.Is(err, ffdtype.ErrValidation) {
		t.Fatalf("bad policy: %v", err)
	}
	a := f.member(fl)
	f.runAndEnd(a, true)
	var te *ffdtype.AlreadyTerminalError
	if _, err := flows.Cancel(f.Ctx, f.Pool, fl.ID, ffdtype.CancelAll, ""); !errors.As(err, &te) || te.State != "completed" {
		t.Fatalf("cancel of a completed flow: %v", err)
	}
}

func TestFlowCompletion(t *testing.T) {
	t.Parallel()
	f := setup(t)
	check := func(fl *ffdtype.Flow, want ffdtype.FlowState) {
		t.Helper()
		got, err := flows.Get(f.Ctx, f.Pool, fl.ID)
		if err != nil || got.State != want {
			t.Fatalf("flow %s: %v %v, want %s", fl.ID, got.State, err, want)
		}
		outcome := string(want)
		if want == ffdtype.FlowOpen {
			if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id = $1 AND execution_id IS NULL`, fl.ID); n != 0 {
				t.Fatalf("open flow has %d flow events", n)
			}
			return
		}
		if n := f.Count(`SELECT count(*) FROM ff_completion_event WHERE flow_id = $1 AND execution_id IS NULL AND outcome = $2`, fl.ID, outcome); n != 1 {
			t.Fatalf("flow %s: %d %s flow events, want 1", fl.ID, n, outcome)
		}
		if got.TerminalAt == nil {
			t.Fatal("terminal flow without terminal_at")
		}
	}
	ok := f.flow()
	a, b := f.member(ok), f.member(ok)
	f.runAndEnd(a, true)
	check(ok, ffdtype.FlowOpen)
	f.runAndEnd(b, true)
	check(ok, ffdtype.FlowCompleted)

	bad := f.flow()
	c, d := f.member(bad), f.member(bad)
	f.runAndEnd(c, false)
	f.runAndEnd(d, true)
	check(bad, ffdtype.FlowFailed)

	cancelled := f.flow()
	f.member(cancelled)
	if _, err := flows.Cancel(f.Ctx, f.Pool, cancelled.ID, ffdtype.CancelAll, ""); err != nil {
		t.Fatal(err)
	}
	check(cancelled, ffdtype.FlowCancelled)

	// Members ending concurrently: the last one to commit finishes the flow.
	race := f.flow()
	var ids []ffdtype.ExecutionID
	for range 20 {
		ids = append(ids, f.member(race))
	}
	claimed := map[ffdtype.ExecutionID]int64{}
	for _, id := range ids {
		x, _ := leases.Get(f.Ctx, f.Pool, id)
		got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: x.Lane, Worker: "w/1", Max: 1})
		if err != nil || len(got) != 1 {
			t.Fatal(err)
		}
		claimed[id] = got[0].LeaseEpoch
	}
	errs := make(chan error, len(ids))
	for id, epoch := range claimed {
		go func() {
			_, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, id, epoch, nil)
			errs <- err
		}()
	}
	for range ids {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	check(race, ffdtype.FlowCompleted)
}

// An ending of a row its transaction holds locked trusts what the lock
// read (Termination.Locked) only as far as the row agrees: a state or
// epoch that differs, a row already terminal, or a skip of a row that is
// not blocked ends nothing, as an ending that locks the row itself would
// not.
func TestTerminateLockedRows(t *testing.T) {
	t.Parallel()
	f := setup(t)
	fl, m, _ := f.everyState()
	live := []ffdtype.State{ffdtype.StateBlocked, ffdtype.StatePending, ffdtype.StateRunning, ffdtype.StateCompleted}
	tests := []struct {
		name   string
		member string
		to     ffdtype.State
		change func(*store.LockedRow)
		ends   bool
	}{
		{"running, as read", "running", ffdtype.StateCancelled, nil, true},
		{"pending, as read", "pending", ffdtype.StateCancelled, nil, true},
		{"blocked, skipped", "blocked", ffdtype.StateSkipped, nil, true},
		{"pending, skipped", "pending", ffdtype.StateSkipped, nil, false},
		{"running, read as pending", "running", ffdtype.StateCancelled, func(r *store.LockedRow) { r.State = ffdtype.StatePending }, false},
		{"running, another epoch", "running", ffdtype.StateCancelled, func(r *store.LockedRow) { r.LeaseEpoch-- }, false},
		{"completed", "completed", ffdtype.StateCancelled, nil, false},
		{"completed, read as pending", "completed", ffdtype.StateCancelled, func(r *store.LockedRow) { r.State = ffdtype.StatePending }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := m[tt.member]
			err := pgx.BeginFunc(f.Ctx, f.Pool, func(tx pgx.Tx) error {
				members, err := store.NewLocks(tx).Members(f.Ctx, fl.ID, live)
				if err != nil {
					return err
				}
				i := slices.IndexFunc(members, func(x store.LockedMember) bool { return x.ID == id.UUID })
				if i < 0 {
					t.Fatalf("Members did not lock the %s member", tt.member)
				}
				row := members[i].Row
				if tt.change != nil {
					tt.change(&row)
				}
				ended, err := store.Terminate(f.Ctx, tx, []store.Termination{{ID: id, State: tt.to, Reason: "test", By: "test", Locked: &row}})
				if err != nil {
					return err
				}
				if got := len(ended) == 1; got != tt.ends {
					t.Fatalf("ended %+v; want an ending %v", ended, tt.ends)
				}
				var events int
				if err := tx.QueryRow(f.Ctx, `SELECT count(*) FROM ff_completion_event WHERE execution_id = $1 AND outcome = $2`,
					id.UUID, string(ffdtype.OutcomeOf(tt.to))).Scan(&events); err != nil {
					return err
				}
				if want := map[bool]int{true: 1, false: 0}[tt.ends]; events != want {
					t.Fatalf("%d %s events, want %d", events, ffdtype.OutcomeOf(tt.to), want)
				}
				return errRollback
			})
			if !errors.Is(err, errRollback) {
				t.Fatal(err)
			}
		})
	}
}

var errRollback = errors.New("rolled back")
