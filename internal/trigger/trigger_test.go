package trigger_test

import (
	"context"
	"errors"
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
				Params: tr.Params, Key: trigger.Key(tr.Name, e.ID), FlowID: trigger.FlowID(tr.Name, e.ID)})
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
