package trigger_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schedule"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
	"github.com/flowfabric/ffd/internal/trigger"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// A daemon that died between starting an event's targets and marking the
// event fired (its transaction for the start committed, the mark never
// came) leaves the event unfired: the next pass fires it again and
// starts nothing twice, for a flow and for an execution. A pass that
// dies before its commit leaves nothing behind but the unfired event.
func TestFireAfterACrashStartsNothingTwice(t *testing.T) {
	t.Parallel()
	f := testdb.Checked(t, 2*time.Minute)
	ctx := f.Ctx
	flow := ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "l"}}}}
	for _, p := range []trigger.Params{
		{Name: "flow", Event: "e", Flow: &flow},
		{Name: "exec", Event: "e", Execution: &ffdtype.CreateParams{Lane: "l"}},
	} {
		if _, err := trigger.Create(ctx, f.Pool, leases.Limits{}, p); err != nil {
			t.Fatal(err)
		}
	}
	e, _, err := trigger.Publish(ctx, f.Pool, leases.Limits{}, trigger.Publication{Name: "e", Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	// The crash window: each target started and committed, the event
	// not marked.
	ts, err := store.ListTriggers(ctx, f.Pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
			_, err := schedule.Start(ctx, tx, leases.Limits{}, schedule.Firing{Namespace: tr.Namespace, Target: tr.Target,
				Params: tr.Params, Key: trigger.Key(tr.Namespace, tr.Name, e.ID), FlowID: trigger.FlowID(tr.Name, e.ID)})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	// A pass that dies before its commit.
	crash := errors.New("killed")
	if err := pgx.BeginFunc(ctx, f.Pool, func(tx pgx.Tx) error {
		if _, err := trigger.Fire(ctx, tx, leases.Limits{}, 10, 1, zap.NewNop()); err != nil {
			return err
		}
		return crash
	}); !errors.Is(err, crash) {
		t.Fatalf("the pass that dies: %v", err)
	}
	res, err := trigger.Fire(ctx, f.Pool, leases.Limits{}, 10, 4, zap.NewNop())
	if err != nil || res.Events != 1 || res.Started != 0 {
		t.Fatalf("the pass after the crash: %+v, %v; want the event fired, nothing started again", res, err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_flow`); n != 1 {
		t.Fatalf("%d flows, want 1", n)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id IS NULL`); n != 1 {
		t.Fatalf("%d executions of the execution trigger, want 1", n)
	}
	got, err := store.GetEvent(context.Background(), f.Pool, e.ID)
	if err != nil || got.FiredAt == nil || got.Error != "" {
		t.Fatalf("the event: %+v, %v; want fired, without error", got, err)
	}
	if res, err := trigger.Fire(ctx, f.Pool, leases.Limits{}, 10, 4, zap.NewNop()); err != nil || res.Events != 0 {
		t.Fatalf("a pass with nothing to fire: %+v, %v", res, err)
	}
}

// How many events share a transaction: on one Postgres a pass fires its
// batch in one (one commit for all); in the routed form, as on a
// distributed Postgres, the events of one shard's partitions share one,
// the shards fired several at once (one at a time here, for a count that
// does not depend on which goes first). Either way a pass fires no more
// than its limit, and the next the rest; what each event starts lies on
// the event's partition, and the trigger's count is right.
// Not parallel: store.RouteAll is process-wide (the package's parallel
// tests start once this one is done).
func TestFireTransactions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		routed  bool
		workers int
		want    int // transactions that marked events fired
	}{
		{"one Postgres", false, 4, 2}, // a pass of 8, a pass of the other 4
		{"routed", true, 1, 2},        // shard 7's 8 events (partitions 7 and 39), then shard 9's 4
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			f := testdb.Checked(t, 2*time.Minute)
			ctx := f.Ctx
			flow := ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "l"}}}}
			if _, err := trigger.Create(ctx, f.Pool, leases.Limits{}, trigger.Params{Name: "flow", Event: "e", Flow: &flow}); err != nil {
				t.Fatal(err)
			}
			f.Exec(`CREATE TABLE fired_in (txid xid8, event_id uuid);
				CREATE FUNCTION fired_in() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN INSERT INTO fired_in VALUES (pg_current_xact_id(), NEW.event_id); RETURN NULL; END$$;
				CREATE TRIGGER fired_in AFTER UPDATE OF fired_at ON ff_event FOR EACH ROW EXECUTE FUNCTION fired_in()`)
			// Four events on each of three partitions, two of them on one
			// shard: a routed pass that fired each partition's events
			// alone would commit three times, each event alone twelve.
			keys := keysOn(t, "e", []int16{7, 39, 9}, 4)
			events := len(keys)
			for _, k := range keys {
				if _, _, err := trigger.Publish(ctx, f.Pool, leases.Limits{}, trigger.Publication{Name: "e", Key: k}); err != nil {
					t.Fatal(err)
				}
			}
			for i, want := range []int{8, events - 8, 0} {
				res, err := trigger.Fire(ctx, f.Pool, leases.Limits{}, 8, tc.workers, zap.NewNop())
				if err != nil || res.Events != want || res.Started != want {
					t.Fatalf("pass %d: %+v, %v; want %d events fired, %d flows started", i+1, res, err, want, want)
				}
			}
			if n := f.Count(`SELECT count(*) FROM ff_flow`); n != events {
				t.Fatalf("%d flows, want %d", n, events)
			}
			if n := f.Count(`SELECT count(DISTINCT event_id) FROM fired_in`); n != events {
				t.Fatalf("%d events marked fired, want %d", n, events)
			}
			if got := f.Count(`SELECT count(DISTINCT txid) FROM fired_in`); got != tc.want {
				t.Fatalf("%d events marked fired in %d transactions, want %d", events, got, tc.want)
			}
			if n := f.Count(`SELECT count(*) FROM ff_flow f JOIN ff_event e ON f.tags->>'ffd_event' = e.event_id::text
				WHERE f.partition_key = e.partition_key`); n != events {
				t.Fatalf("%d of %d flows on their event's partition, want all", n, events)
			}
			tr, err := store.GetTrigger(ctx, f.Pool, "flow")
			if err != nil || tr.Fired != int64(events) {
				t.Fatalf("the trigger: %+v, %v; want %d fired", tr, err, events)
			}
			if n := f.Count(`SELECT count(*) FROM ff_trigger_fired`); n != 3 {
				t.Fatalf("%d rows count the trigger's firings, want one for each of 3 partitions", n)
			}
		})
	}
}

// keysOn finds n keys of events of name on each of parts.
func keysOn(t *testing.T, name string, parts []int16, n int) []string {
	t.Helper()
	var keys []string
	for _, p := range parts {
		found := 0
		for i := 0; found < n; i++ {
			if i == 1<<20 {
				t.Fatalf("no %d keys on partition %d", n, p)
			}
			if k := fmt.Sprint("k", i); store.EventPartition(leases.DefaultNamespace, name, k) == p {
				keys, found = append(keys, k), found+1
			}
		}
	}
	return keys
}
