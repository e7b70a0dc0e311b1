package store_test

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

var quoted = regexp.MustCompile(`'([^']*)'::text`)

func strs[T ~string](xs []T) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// Every vocabulary set in names.go is exactly what the schema's CHECK
// constraint on that column allows, in both directions: a Go constant the
// database refuses, or a database value Go cannot name, fails here.
func TestNamesMatchTheSchema(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)

	// checkOn returns the values the single-column CHECK on table.column
	// allows.
	checkOn := func(table, column string) []string {
		t.Helper()
		var def string
		err := db.Pool.QueryRow(ctx, `
			SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
			JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]
			WHERE c.contype = 'c' AND c.conrelid = $1::regclass AND cardinality(c.conkey) = 1
				AND a.attname = $2 AND pg_get_constraintdef(c.oid) LIKE '%ARRAY[%'`, table, column).Scan(&def)
		if err != nil {
			t.Fatalf("read the CHECK on %s.%s: %v", table, column, err)
		}
		var vals []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			vals = append(vals, m[1])
		}
		return vals
	}
	cases := []struct {
		table, column string
		want          []string
	}{
		{"ff_execution", "state", strs(ffdtype.States)},
		{"ff_attempt", "outcome", strs(ffdtype.AttemptOutcomes)},
		{"ff_lease_event", "event_type", strs(store.LeaseEventTypes)},
		{"ff_flow", "state", strs(ffdtype.FlowStates)},
		{"ff_flow", "cancellation_policy", strs(ffdtype.CancelPolicies)},
		{"ff_edge", "state", strs(ffdtype.EdgeStates)},
		{"ff_edge", "resolved_outcome", strs(ffdtype.ExecutionOutcomes)},
		{"ff_edge_group", "policy", strs(ffdtype.PolicyKinds)},
		{"ff_edge_group", "on_satisfied", strs(ffdtype.OnSatisfieds)},
		{"ff_edge_group", "decision", strs(ffdtype.Decisions)},
		{"ff_outbox_consumer", "stream", strs(ffdtype.OutboxStreams)},
	}
	for _, c := range cases {
		got := checkOn(c.table, c.column)
		if !sameSet(got, c.want) {
			t.Errorf("%s.%s: the schema allows %v, Go names %v", c.table, c.column, got, c.want)
		}
	}

	// The completion event's outcome CHECK has one list for executions and
	// one for flows, in that order.
	var def string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
		WHERE conname = 'ff_completion_event_outcome'`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	lists := regexp.MustCompile(`ARRAY\[([^\]]*)\]`).FindAllStringSubmatch(def, -1)
	if len(lists) != 2 {
		t.Fatalf("ff_completion_event_outcome: want two value lists, got %q", def)
	}
	for i, want := range [][]string{strs(ffdtype.ExecutionOutcomes), strs(ffdtype.FlowOutcomes)} {
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(lists[i][1], -1) {
			got = append(got, m[1])
		}
		if !sameSet(got, want) {
			t.Errorf("ff_completion_event outcome list %d: the schema allows %v, Go names %v", i, got, want)
		}
	}
}

// No trigger of the schema sends a notification: a distributed Postgres
// would send it from the node holding the rows, where nobody listens. The
// writers send their own (notice.go). The SQL API's functions (ffd_,
// sqlapi.sql) are writers: a caller's session runs them where it is, as
// the Go API's statements run, so they send their own too; none of them
// is a trigger, and no trigger calls one.
func TestSchemaSendsNoNotification(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	var fns, called []string
	err := db.Pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(proname::text ORDER BY proname), '{}') FROM pg_proc
		WHERE pronamespace = current_schema()::regnamespace AND prosrc ILIKE '%notify%'
			AND (proname NOT LIKE 'ffd\_%' OR prorettype = 'trigger'::regtype)`).Scan(&fns)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) > 0 {
		t.Errorf("functions %v of the schema notify; the writers must (store.Notices)", fns)
	}
	err = db.Pool.QueryRow(ctx, `
		SELECT coalesce(array_agg(proname::text ORDER BY proname), '{}') FROM pg_proc
		WHERE pronamespace = current_schema()::regnamespace AND prorettype = 'trigger'::regtype
			AND prosrc ILIKE '%ffd\_%'`).Scan(&called)
	if err != nil {
		t.Fatal(err)
	}
	if len(called) > 0 {
		t.Errorf("trigger functions %v call the SQL API, whose functions notify", called)
	}
}

// The mappings cover every terminal state and name only known values.
func TestMappings(t *testing.T) {
	t.Parallel()
	for _, s := range ffdtype.States {
		o, a, l := ffdtype.OutcomeOf(s), store.AttemptOutcomeOf(s), store.LeaseEndOf(s)
		if !s.Terminal() {
			if o != "" {
				t.Errorf("OutcomeOf(%s) = %q, want none for a live state", s, o)
			}
			continue
		}
		if !slices.Contains(ffdtype.ExecutionOutcomes, o) {
			t.Errorf("OutcomeOf(%s) = %q, not an execution outcome", s, o)
		}
		if !slices.Contains(ffdtype.AttemptOutcomes, a) {
			t.Errorf("AttemptOutcomeOf(%s) = %q, not an attempt outcome", s, a)
		}
		if !slices.Contains(store.LeaseEventTypes, l) {
			t.Errorf("LeaseEndOf(%s) = %q, not a lease event type", s, l)
		}
	}
	want := map[ffdtype.State]string{
		ffdtype.StateCompleted: "success/succeeded/released",
		ffdtype.StateFailed:    "failed/failed/released",
		ffdtype.StateCancelled: "cancelled/cancelled/revoked",
		ffdtype.StateExpired:   "expired/timed_out/expired",
		ffdtype.StateSkipped:   "skipped/timed_out/released",
	}
	for s, w := range want {
		if got := fmt.Sprintf("%s/%s/%s", ffdtype.OutcomeOf(s), store.AttemptOutcomeOf(s), store.LeaseEndOf(s)); got != w {
			t.Errorf("%s maps to %s, want %s", s, got, w)
		}
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// ff_attempt_all reads an attempt held on its execution row with the
// outcome AttemptOutcomeOf gives the execution's terminal state, the
// epoch before the fencing bump for a lease taken away, and the error the
// ending recorded: the view and the Go mapping say the same.
func TestHeldAttemptsReadAsTheMappingSays(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := testdb.New(t)
	for _, s := range []ffdtype.State{ffdtype.StateCompleted, ffdtype.StateFailed, ffdtype.StateCancelled, ffdtype.StateExpired} {
		// Ended while running at epoch 3; a lease taken away was bumped.
		epoch := 3
		if s == ffdtype.StateCancelled || s == ffdtype.StateExpired {
			epoch = 4
		}
		var outcome, errText *string
		var gotEpoch int
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO ff_execution (partition_key, execution_id, lane, state, attempt, lease_epoch, started_at, terminal_at,
				attempt_worker, attempt_started_at, result, last_error, cancellation_reason, cancelled_by)
			VALUES (1, gen_random_uuid(), 'l', $1, 1, $2, now(), now(), 'w/1', now(),
				CASE WHEN $1 = 'completed' THEN '\x'::bytea END, 'the error',
				CASE WHEN $1 = 'cancelled' THEN 'the reason' END, CASE WHEN $1 = 'cancelled' THEN 'ops' END)`, string(s), epoch)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		err = db.Pool.QueryRow(ctx, `SELECT a.outcome, a.error, a.lease_epoch FROM ff_attempt_all a
			JOIN ff_execution e USING (partition_key, execution_id) WHERE e.state = $1`, string(s)).Scan(&outcome, &errText, &gotEpoch)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		wantErr := map[ffdtype.State]string{ffdtype.StateFailed: "the error", ffdtype.StateExpired: "the error", ffdtype.StateCancelled: "the reason"}[s]
		if outcome == nil || *outcome != string(store.AttemptOutcomeOf(s)) || gotEpoch != 3 || (wantErr == "") != (errText == nil) || errText != nil && *errText != wantErr {
			t.Errorf("%s: held attempt reads outcome %v error %v epoch %d; want %s, %q, 3", s, deref(outcome), deref(errText), gotEpoch, store.AttemptOutcomeOf(s), wantErr)
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
