package daemon

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/cascade"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Each component runs alone on an env of its own, without the rest of
// the daemon: here the cascade pool (fed one hint by hand) and the sweeper
// (fed nothing) each carry a completed root's event to its downstream,
// and each Stop returns with its loops ended.
func TestComponentsRunAlone(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		build func(e *env) component
		hint  bool
	}{
		{"cascade pool", func(e *env) component { return &cascadePool{e: e} }, true},
		{"sweeper", func(e *env) component { return &sweeper{e: e} }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.New(t)
			cfg := Config{Pool: db.Pool, DisableListen: true, SweepInterval: 50 * time.Millisecond, DispatchGrace: time.Millisecond}
			if err := cfg.normalize(); err != nil {
				t.Fatal(err)
			}
			e := &env{cfg: cfg, log: cfg.Logger, m: cfg.Metrics, fanout: newFanout(cfg.Metrics, 10), work: ctx}
			e.cascade, e.due = cascade.New(cfg.Pool, cfg.Metrics), &dueLanes{e: e, since: time.Now().Add(-time.Minute)}

			sub, err := flows.Submit(ctx, db.Pool, leases.Limits{}, ffdtype.SubmitFlowParams{
				Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "alone"}}, {Ref: "b", Params: ffdtype.CreateParams{Lane: "alone"}}},
				Edges: []ffdtype.SubmitEdge{{From: "a", To: "b"}},
			})
			if err != nil {
				t.Fatal(err)
			}
			xs, err := leases.Claim(ctx, db.Pool, ffdtype.ClaimParams{Lane: "alone", Worker: "w/1", Max: 1})
			if err != nil || len(xs) != 1 {
				t.Fatalf("claim the root: %v, %d claimed", err, len(xs))
			}
			if _, err := leases.Complete(ctx, db.Pool, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
				t.Fatal(err)
			}
			c := tt.build(e)
			c.Start(ctx)
			c.Start(ctx) // a second Start is a no-op
			if tt.hint {
				e.fanout.Handle(listener.Notification{Topic: listener.Completion, Payload: strconv.Itoa(int(xs[0].ID.Partition))})
			}
			b := sub.Executions["b"].ID
			deadline := time.Now().Add(time.Minute)
			for {
				x, err := store.GetExecution(ctx, db.Pool, b)
				if err != nil {
					t.Fatal(err)
				}
				if x.State == ffdtype.StatePending {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("downstream still %s: the %s did not dispatch the root's event", x.State, tt.name)
				}
				time.Sleep(10 * time.Millisecond)
			}
			c.Stop(context.Background())
			c.Stop(context.Background()) // a second Stop is a no-op
		})
	}
}
