package store_test

import (
	"crypto/rand"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

const day = 24 * time.Hour

// v7At is a v7 uuid minted at t, as the engine would have minted it then.
func v7At(t *testing.T, at time.Time) uuid.UUID {
	t.Helper()
	var u uuid.UUID
	if _, err := rand.Read(u[:]); err != nil {
		t.Fatal(err)
	}
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

type retention struct {
	*testdb.Fixture
}

// finished creates a solo execution as if created `age` ago, runs it to
// completion, and dates its end `age` ago.
func (f retention) finished(ns, key string, age time.Duration) ffdtype.ExecutionID {
	f.T.Helper()
	return f.ended(ns, key, age, false)
}

// ended is finished, the execution failing instead when fail is set: a
// dead letter.
func (f retention) ended(ns, key string, age time.Duration, fail bool) ffdtype.ExecutionID {
	f.T.Helper()
	u := v7At(f.T, time.Now().Add(-age))
	lane := "ret_" + u.String()[:8]
	id := ffdtype.ExecutionID{Partition: ident.Partition(u), UUID: u}
	if key != "" {
		id.Partition = ident.KeyPartition(ns, key) // where keyed rows live
	}
	x, _, err := store.InsertExecution(f.Ctx, f.Pool, store.NewExecution{
		ID: id, Namespace: ns, Lane: lane, State: ffdtype.StatePending,
		MaxAttempts: 1, LeaseTTL: time.Minute, RequiredCapabilities: []string{}, Payload: []byte{}, IdempotencyKey: key,
		Retry: ffdtype.RetryPolicy{Base: time.Second, Max: time.Second, Multiplier: 1}, Tags: map[string]any{},
	})
	if err != nil {
		f.T.Fatal(err)
	}
	claimed, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
	if err != nil || len(claimed) != 1 {
		f.T.Fatalf("claim: %v %v", claimed, err)
	}
	if fail {
		_, err = leases.Fail(f.Ctx, f.Pool, x.ID, claimed[0].LeaseEpoch, ffdtype.FailParams{Error: "boom"})
	} else {
		_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, claimed[0].LeaseEpoch, nil)
	}
	if err != nil {
		f.T.Fatal(err)
	}
	f.Exec(`UPDATE ff_execution SET terminal_at = now() - $2 * interval '1 second' WHERE execution_id = $1`, u, age.Seconds())
	return x.ID
}

func (f retention) exists(id ffdtype.ExecutionID) bool {
	return f.Count(`SELECT count(*) FROM ff_execution WHERE execution_id = $1`, id.UUID) == 1
}

// Finished solo executions older than their namespace's age go, with
// their attempts, in batches; live ones, recent ones and those of a
// namespace kept forever stay; a deleted execution's idempotency key is
// free again.
func TestRetentionDeletesFinishedExecutions(t *testing.T) {
	t.Parallel()
	f := retention{testdb.Checked(t, 2*time.Minute)}
	old1 := f.finished("default", "invoice-1", 40*day)
	old2 := f.finished("default", "", 35*day)
	recent := f.finished("default", "", 2*day)
	kept := f.finished("audit", "", 400*day)
	short := f.finished("scratch", "", 2*day)
	live, _, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "live"})
	if err != nil {
		t.Fatal(err)
	}
	ages := store.Ages{Default: 30 * day, ByNamespace: map[string]time.Duration{"audit": 0, "scratch": day}}

	n, err := store.DeleteFinishedExecutions(f.Ctx, f.Pool, ages, 2)
	if err != nil || n != 2 {
		t.Fatalf("first batch of 2: deleted %d, %v", n, err)
	}
	n, err = store.DeleteFinishedExecutions(f.Ctx, f.Pool, ages, 2)
	if err != nil || n != 1 {
		t.Fatalf("second batch: deleted %d, %v; want the last one", n, err)
	}
	if n, _ := store.DeleteFinishedExecutions(f.Ctx, f.Pool, ages, 2); n != 0 {
		t.Fatalf("third batch deleted %d, want 0", n)
	}
	for id, want := range map[ffdtype.ExecutionID]bool{old1: false, old2: false, short: false, recent: true, kept: true, live.ID: true} {
		if f.exists(id) != want {
			t.Errorf("execution %s exists = %v, want %v", id, !want, want)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt WHERE execution_id = ANY($1)`, []uuid.UUID{old1.UUID, old2.UUID, short.UUID}); n != 0 {
		t.Fatalf("%d attempts of deleted executions left", n)
	}
	again, existed, err := leases.Create(f.Ctx, f.Pool, leases.Limits{}, ffdtype.CreateParams{Lane: "again", IdempotencyKey: "invoice-1"})
	if err != nil || existed || again.ID == old1 {
		t.Fatalf("reuse of a deleted execution's key: %v, existed %v, %v; want a new execution", again, existed, err)
	}
	if n, _ := store.DeleteFinishedExecutions(f.Ctx, f.Pool, store.Ages{}, 10); n != 0 {
		t.Fatalf("retention off deleted %d", n)
	}
}

// Dead letters are kept for their own age when one is set: longer or
// shorter than other finished executions, or forever; once rerun, one is
// an execution like any other.
func TestRetentionOfDeadLetters(t *testing.T) {
	t.Parallel()
	f := retention{testdb.Checked(t, 2*time.Minute)}
	done := f.finished("default", "", 40*day)
	dead := f.ended("default", "", 40*day, true)
	older := f.ended("default", "", 100*day, true)
	young := f.ended("scratch", "", 3*day, true)
	rerun := f.ended("default", "", 100*day, true)
	if _, err := leases.Rerun(f.Ctx, f.Pool, leases.Limits{}, rerun); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		dead time.Duration
		want map[ffdtype.ExecutionID]bool
	}{
		{"forever", -1, map[ffdtype.ExecutionID]bool{done: false, dead: true, older: true, young: true, rerun: false}},
		{"90 days", 90 * day, map[ffdtype.ExecutionID]bool{dead: true, older: false, young: true}},
		{"2 days", 2 * day, map[ffdtype.ExecutionID]bool{dead: false, young: false}},
	} {
		ages := store.Ages{Default: 30 * day, ByNamespace: map[string]time.Duration{"scratch": day}, Dead: c.dead}
		if _, err := store.DeleteFinishedExecutions(f.Ctx, f.Pool, ages, 100); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for id, want := range c.want {
			if f.exists(id) != want {
				t.Errorf("dead letters kept %s: execution %s exists = %v, want %v", c.name, id, !want, want)
			}
		}
	}
}

// A finished flow goes with its members, attempts, edges and groups once
// it and every member finished longer ago than the age; an open flow, or
// one whose member finished recently, stays.
func TestRetentionDeletesFinishedFlows(t *testing.T) {
	t.Parallel()
	f := retention{testdb.Checked(t, 2*time.Minute)}
	d := cascade.New(f.Pool, nil)
	run := func(lane string) *ffdtype.SubmittedFlow {
		sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{
			Flow:  ffdtype.CreateFlowParams{Kind: "ret"},
			Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: lane}}, {Ref: "b", Params: ffdtype.CreateParams{Lane: lane}}},
			Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			xs, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
			if err != nil || len(xs) != 1 {
				return sub // b is blocked until the dispatch: the caller decides
			}
			if _, err := leases.Complete(f.Ctx, f.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := d.DispatchBatch(f.Ctx, 10, 0); err != nil {
				t.Fatal(err)
			}
		}
		return sub
	}
	age := func(flowID uuid.UUID, flowAge, memberAge time.Duration) {
		f.Exec(`UPDATE ff_flow SET terminal_at = now() - $2 * interval '1 second' WHERE flow_id = $1`, flowID, flowAge.Seconds())
		f.Exec(`UPDATE ff_execution SET terminal_at = now() - $2 * interval '1 second' WHERE flow_id = $1`, flowID, memberAge.Seconds())
	}
	gone := run("gone")
	age(gone.Flow.ID, 40*day, 40*day)
	freshMember := run("fresh")
	age(freshMember.Flow.ID, 40*day, 0)
	f.Exec(`UPDATE ff_execution SET terminal_at = now() WHERE flow_id = $1`, freshMember.Flow.ID)
	open, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "open"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if st := f.Count(`SELECT count(*) FROM ff_flow WHERE state = 'completed'`); st != 2 {
		t.Fatalf("%d completed flows, want 2 before retention", st)
	}

	n, err := store.DeleteFinishedFlows(f.Ctx, f.Pool, store.Ages{Default: 30 * day}, 10)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d flows, %v; want 1", n, err)
	}
	for table, col := range map[string]string{"ff_flow": "flow_id", "ff_execution": "flow_id", "ff_edge": "flow_id", "ff_edge_group": "flow_id"} {
		if n := f.Count(`SELECT count(*) FROM `+table+` WHERE `+col+` = $1`, gone.Flow.ID); n != 0 {
			t.Errorf("%d rows of the deleted flow left in %s", n, table)
		}
	}
	if n := f.Count(`SELECT count(*) FROM ff_attempt WHERE execution_id = ANY($1)`,
		[]uuid.UUID{gone.Executions["a"].ID.UUID, gone.Executions["b"].ID.UUID}); n != 0 {
		t.Fatalf("%d attempts of the deleted flow's members left", n)
	}
	for _, id := range []uuid.UUID{freshMember.Flow.ID, open.Flow.ID} {
		if n := f.Count(`SELECT count(*) FROM ff_flow WHERE flow_id = $1`, id); n != 1 {
			t.Errorf("flow %s was deleted; it must stay", id)
		}
	}
}

// Fired events go once fired longer ago than the age, which frees their
// keys; unfired ones stay however old.
func TestRetentionOfFiredEvents(t *testing.T) {
	t.Parallel()
	f := retention{testdb.Checked(t, 2*time.Minute)}
	old, _, err := store.PublishEvent(f.Ctx, f.Pool, "default", "e", "old", nil)
	if err != nil {
		t.Fatal(err)
	}
	unfired, _, err := store.PublishEvent(f.Ctx, f.Pool, "default", "e", "unfired", nil)
	if err != nil {
		t.Fatal(err)
	}
	f.Exec(`UPDATE ff_event SET published_at = now() - interval '40 days' WHERE event_id = ANY($1)`, []uuid.UUID{old.ID, unfired.ID})
	f.Exec(`UPDATE ff_event SET fired_at = now() - interval '40 days' WHERE event_id = $1`, old.ID)
	if n, err := store.DeleteFiredEvents(f.Ctx, f.Pool, 30*day); err != nil || n != 1 {
		t.Fatalf("delete fired events: %d, %v; want the old fired one", n, err)
	}
	if _, existed, err := store.PublishEvent(f.Ctx, f.Pool, "default", "e", "old", nil); err != nil || existed {
		t.Fatalf("publish the deleted event's key again: existed %v, %v; want a new event", existed, err)
	}
	if _, existed, err := store.PublishEvent(f.Ctx, f.Pool, "default", "e", "unfired", nil); err != nil || !existed {
		t.Fatalf("publish the unfired event's key again: existed %v, %v; want the kept one", existed, err)
	}
}

// A finished flow goes with its sub-flow steps and compensations, but
// not while its compensations have not started.
func TestRetentionOfLinkedFlows(t *testing.T) {
	t.Parallel()
	f := retention{testdb.Checked(t, 2*time.Minute)}
	submit := func(kind string) *ffdtype.SubmittedFlow {
		sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{
			Flow: ffdtype.CreateFlowParams{Kind: kind},
			Nodes: []ffdtype.SubmitNode{
				{Ref: "pay", Params: ffdtype.CreateParams{Lane: "l"}, Compensate: &ffdtype.CreateParams{Lane: "l"}},
				{Ref: "child", Flow: &ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "x", Params: ffdtype.CreateParams{Lane: "l"}}}}},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := flows.Cancel(f.Ctx, f.Pool, sub.Flow.ID, ffdtype.CancelAll, "test"); err != nil {
			t.Fatal(err)
		}
		f.Exec(`UPDATE ff_flow SET terminal_at = now() - interval '40 days' WHERE flow_id = $1`, sub.Flow.ID)
		f.Exec(`UPDATE ff_execution SET terminal_at = now() - interval '40 days' WHERE flow_id = $1`, sub.Flow.ID)
		f.Exec(`UPDATE ff_subflow SET ended_at = now() WHERE flow_id = $1`, sub.Flow.ID)
		return sub
	}
	armed, done := submit("armed"), submit("done")
	f.Exec(`UPDATE ff_flow SET compensation = 'not_needed' WHERE flow_id = $1`, done.Flow.ID)
	if _, err := cascade.New(f.Pool, nil).DispatchBatch(f.Ctx, 100, 0); err != nil {
		t.Fatal(err)
	}
	n, err := store.DeleteFinishedFlows(f.Ctx, f.Pool, store.Ages{Default: 30 * 24 * time.Hour}, 10)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d flows, %v; want 1 (the armed one stays)", n, err)
	}
	for _, table := range []string{"ff_flow", "ff_subflow", "ff_compensation"} {
		if n := f.Count(`SELECT count(*) FROM `+table+` WHERE flow_id = $1`, done.Flow.ID); n != 0 {
			t.Errorf("%d rows of the deleted flow left in %s", n, table)
		}
		if n := f.Count(`SELECT count(*) FROM `+table+` WHERE flow_id = $1`, armed.Flow.ID); n == 0 {
			t.Errorf("the armed flow's rows in %s were deleted", table)
		}
	}
}
