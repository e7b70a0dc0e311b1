package daemon_test

import (
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/daemon"
)

// The linker acts on notifications, not only at its interval: with an
// interval of an hour, a sub-flow step that becomes ready starts its
// child (the step's nudge on ff_event), and the child's end ends the
// step (the completion notification, watched while a sub-flow is in
// progress), each within WaitFor's budget; then a failed flow's
// compensation starts.
func TestLinkerWakesOnNotifications(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d := f.startDaemon(daemon.Config{ScheduleInterval: time.Hour})
	f.WaitFor("the daemon ready, its LISTEN up", d.Ready)
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{
		{Ref: "pay", Params: ffd.CreateParams{Lane: "l"}, Compensate: &ffd.CreateParams{Lane: "l"}},
		{Ref: "child", Flow: &ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "x", Params: ffd.CreateParams{Lane: "l"}}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	step := sub.Executions["child"].ID
	var child *ffd.Flow
	f.WaitFor("the child started on the step's notification (the interval is an hour)", func() bool {
		child, err = f.client.ChildFlow(f.Ctx, step)
		return err == nil && child != nil
	})
	run := func(want int) {
		xs, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "l", Worker: "w/1", Max: 10})
		if err != nil || len(xs) != want {
			t.Fatalf("claimed %d (%v); want %d", len(xs), err, want)
		}
		for _, x := range xs {
			if x.Step == "pay" {
				if _, err := f.client.Complete(f.Ctx, x.ID, x.LeaseEpoch, nil); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if _, err := f.client.Fail(f.Ctx, x.ID, x.LeaseEpoch, ffd.FailParams{Error: "no"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(2) // pay completes, the child's x fails
	f.WaitFor("the step failed as its child did, on the completion notification", func() bool {
		x, err := f.client.Get(f.Ctx, step)
		return err == nil && x.State == ffd.StateFailed
	})
	f.WaitFor("the failed flow's compensation started", func() bool {
		c, err := f.client.Compensation(f.Ctx, sub.Flow.ID)
		return err == nil && c != nil && c.Executions["pay"] != nil
	})
}
