package schema_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Attempts written before migration 18 (a row per attempt, the running one
// open) stay readable after it: the running execution's open attempt moves
// onto its row, every ended one stays a row, ff_attempt_all lists them all,
// and the execution then ends as any other.
func TestAttemptsWrittenBeforeTheDietStayReadable(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 17)
	running, done := ident.NewExecutionID(), ident.NewExecutionID()
	for _, w := range []struct {
		id  ffdtype.ExecutionID
		sql string
	}{
		// Running its second attempt, at epoch 2; the first failed.
		{running, `INSERT INTO ff_execution (partition_key, execution_id, lane, state, attempt, lease_epoch, lease_owner, lease_expires_at, started_at)
			VALUES ($1, $2, 'l', 'running', 2, 2, 'w/2', now() + interval '1 minute', now() - interval '1 minute')`},
		{running, `INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome, error)
			VALUES ($1, $2, 1, 1, 'w/1', now() - interval '1 minute', now() - interval '50 seconds', 'failed', 'boom')`},
		{running, `INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at)
			VALUES ($1, $2, 2, 2, 'w/2', now() - interval '10 seconds')`},
		{running, `INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
			VALUES ($1, $2, 2, 2, 'w/2', 'acquired', now() + interval '1 minute')`},
		// Completed on its first attempt.
		{done, `INSERT INTO ff_execution (partition_key, execution_id, lane, state, attempt, lease_epoch, started_at, terminal_at, result)
			VALUES ($1, $2, 'l', 'completed', 1, 1, now() - interval '1 minute', now(), '\x')`},
		{done, `INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome)
			VALUES ($1, $2, 1, 1, 'w/1', now() - interval '1 minute', now(), 'succeeded')`},
		{done, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome, attempt, dispatched_at)
			VALUES ($1, $2, 'success', 1, now())`},
	} {
		if _, err := db.Pool.Exec(ctx, w.sql, w.id.Partition, w.id.UUID); err != nil {
			t.Fatalf("%s: %v", w.sql, err)
		}
	}
	if _, err := schema.Up(ctx, db.Pool, 0); err != nil {
		t.Fatal(err)
	}
	attempts := func(id ffdtype.ExecutionID) []ffdtype.Attempt {
		t.Helper()
		as, err := store.ListAttempts(ctx, db.Pool, id)
		if err != nil {
			t.Fatal(err)
		}
		return as
	}
	as := attempts(running)
	if len(as) != 2 || as[0].Outcome != "failed" || as[0].Error != "boom" || as[1].Outcome != "" || as[1].Worker != "w/2" || as[1].LeaseEpoch != 2 {
		t.Fatalf("the running execution's attempts after the upgrade: %+v; want attempt 1 failed and attempt 2 open under w/2 at epoch 2", as)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_attempt WHERE execution_id = $1`, running.UUID).Scan(&rows); err != nil || rows != 1 {
		t.Fatalf("%d attempt rows of the running execution (%v), want 1: its open one moves onto the execution", rows, err)
	}
	if as := attempts(done); len(as) != 1 || as[0].Outcome != "succeeded" {
		t.Fatalf("the completed execution's attempts: %+v; want its one succeeded row", as)
	}
	if err := store.CheckInvariants(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Complete(ctx, db.Pool, leases.Limits{}, running, 2, []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if as := attempts(running); len(as) != 2 || as[1].Outcome != "succeeded" || as[1].EndedAt == nil {
		t.Fatalf("after completing it: %+v; want attempt 2 succeeded", as)
	}
	if err := store.CheckInvariants(ctx, db.Pool); err != nil {
		t.Fatal(err)
	}
}

// Migration 19 rewrote the name checks for speed, not meaning: over names
// of every length around the bound, every allowed character and a sample
// of refused ones, the new form accepts exactly what the old one did, and
// the table refuses what it refuses.
func TestNameChecksKeepTheirRule(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.New(t)
	allowed := "ABCXYZabcxyz0189_.:-"
	var names []string
	for _, n := range []int{0, 1, 2, 127, 128, 129, 300} {
		names = append(names, strings.Repeat("a", n), strings.Repeat("Z.", n/2))
	}
	for _, c := range allowed {
		names = append(names, string(c), "x"+string(c)+"y")
	}
	for _, bad := range []string{" ", "/", "é", "\n", "\x01", "a b", "a\n", "\na", "ü", "日本", "a$", "^a", "a*", "[a]"} {
		names = append(names, bad, "lane"+bad, bad+"lane")
	}
	rows, err := db.Pool.Query(ctx, `SELECT n, n ~ '^[A-Za-z0-9_.:-]{1,128}$', length(n) BETWEEN 1 AND 128 AND n ~ '^[A-Za-z0-9_.:-]+$'
		FROM unnest($1::text[]) AS n`, names)
	if err != nil {
		t.Fatal(err)
	}
	accepted := map[string]bool{}
	for rows.Next() {
		var n string
		var was, is bool
		if err := rows.Scan(&n, &was, &is); err != nil {
			t.Fatal(err)
		}
		if was != is {
			t.Errorf("name %q: the old check said %v, the new one %v", n, was, is)
		}
		accepted[n] = was
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		_, err := db.Pool.Exec(ctx, `INSERT INTO ff_execution (partition_key, execution_id, lane, state) VALUES (1, gen_random_uuid(), $1, 'pending')`, n)
		if (err == nil) != accepted[n] {
			t.Errorf("insert with lane %q: %v, want accepted %v", n, err, accepted[n])
		}
		// ff_key's check, rewritten by migration 30, holds the same rule.
		_, err = db.Pool.Exec(ctx, `INSERT INTO ff_key (lane, key) VALUES ($1, 'k') ON CONFLICT DO NOTHING`, n)
		if (err == nil) != accepted[n] {
			t.Errorf("key of lane %q: %v, want accepted %v", n, err, accepted[n])
		}
	}
}

// No check of an ff_ table uses a bounded repetition in a regular
// expression (`{1,128}`): Postgres expands it into that many copies of
// its atom, and evaluates every check of a row on every insert and update
// (migrations 19 and 30 each took one out of a hot path).
func TestNoBoundedRepetitionInChecks(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.New(t)
	rows, err := db.Pool.Query(ctx, `SELECT conrelid::regclass::text, conname::text, pg_get_constraintdef(oid)
		FROM pg_constraint
		WHERE contype = 'c' AND conrelid::regclass::text LIKE 'ff\_%' AND pg_get_constraintdef(oid) ~ '~.*\{[0-9]*,[0-9]*\}'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var table, name, def string
		if err := rows.Scan(&table, &name, &def); err != nil {
			t.Fatal(err)
		}
		t.Errorf("%s.%s uses a bounded repetition: %s; write it as a length test and an unbounded class", table, name, def)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}
