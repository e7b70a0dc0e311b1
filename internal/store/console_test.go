package store_test

import (
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Each consumer's lag counts the events of its own stream after its own
// cursor, and dates the oldest of them; a consumer that has read all has
// no lag.
func TestConsumerLags(t *testing.T) {
	t.Parallel()
	db := testdb.Setup(t, time.Minute)
	ins := func(table string) {
		t.Helper()
		sql := `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, occurred_at)
			VALUES (3, gen_random_uuid(), 'success', now() - interval '90 seconds')`
		if table == "ff_lease_event" {
			sql = `INSERT INTO ff_lease_event (partition_key, execution_id, event_type, lease_epoch, attempt, worker, occurred_at)
				VALUES (3, gen_random_uuid(), 'acquired', 1, 1, 'w', now() - interval '90 seconds')`
		}
		if _, err := db.Pool.Exec(db.Ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ins("ff_completion_event")
	ins("ff_completion_event")
	ins("ff_lease_event")
	// "done" read everything so far (its cursor at the newest event);
	// the others start at the beginning.
	if _, err := db.Pool.Exec(db.Ctx, `INSERT INTO ff_outbox_consumer (name, stream) VALUES ('all', 'all'), ('comp', 'completion'), ('lease', 'lease');
		INSERT INTO ff_outbox_consumer (name, stream, cursor_txid, cursor_event_id)
			SELECT 'done', 'all', txid, event_id FROM ff_lease_event`); err != nil {
		t.Fatal(err)
	}
	cs, err := store.ConsumerLags(db.Ctx, db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{"all": 3, "comp": 2, "done": 0, "lease": 1}
	if len(cs) != len(want) {
		t.Fatalf("%d consumers, want %d: %+v", len(cs), len(want), cs)
	}
	for _, c := range cs {
		if c.Behind != want[c.Name] {
			t.Errorf("%s is %d events behind, want %d", c.Name, c.Behind, want[c.Name])
		}
		switch {
		case want[c.Name] == 0 && c.LagSeconds != nil:
			t.Errorf("%s has read everything, yet lags %v s", c.Name, *c.LagSeconds)
		case want[c.Name] > 0 && (c.LagSeconds == nil || *c.LagSeconds < 89 || *c.LagSeconds > 600):
			t.Errorf("%s lags %v s, want about 90 (its oldest unread event's age)", c.Name, c.LagSeconds)
		}
	}
}
