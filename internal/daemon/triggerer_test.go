package daemon_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/daemon"
)

// Events fire when their notifications come, not only at the triggerer's
// interval: with an interval of an hour, an event published from Go and
// one published from SQL after the daemon started each fire within
// WaitFor's budget.
func TestTriggererWakesOnPublish(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.CreateTrigger(f.Ctx, ffd.TriggerParams{Name: "t", Event: "e", Execution: &ffd.CreateParams{Lane: "l"}}); err != nil {
		t.Fatal(err)
	}
	d := f.startDaemon(daemon.Config{ScheduleInterval: time.Hour})
	f.WaitFor("the daemon ready, its LISTEN up", d.Ready)
	if _, err := f.client.PublishEvent(f.Ctx, ffd.PublishParams{Name: "e", Key: "from-go"}); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(f.Ctx, f.Pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(f.Ctx, `SELECT ff_publish_event('default', 'e', 'from-sql'), pg_notify('ff_event', '')`)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("both events fired on their notifications (the interval is an hour)", func() bool {
		return f.Count(`SELECT count(*) FROM ff_event WHERE fired_at IS NOT NULL`) == 2
	})
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'l'`); n != 2 {
		t.Fatalf("%d executions started, want 2", n)
	}
}
