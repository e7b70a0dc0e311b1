package schema_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	if v, err := schema.Current(ctx, db.Pool); err != nil || v != 0 {
		t.Fatalf("empty database: version %d, %v; want 0", v, err)
	}
	if err := schema.Check(ctx, db.Pool); !errors.Is(err, schema.ErrSchemaBehind) {
		t.Fatalf("Check on empty database = %v, want ErrSchemaBehind", err)
	}
	applied, err := schema.Up(ctx, db.Pool, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != int(schema.Latest()) {
		t.Fatalf("first Up applied %d migrations, want %d", len(applied), schema.Latest())
	}
	again, err := schema.Up(ctx, db.Pool, 0)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Up applied %d (err %v), want 0", len(again), err)
	}
	if err := schema.Check(ctx, db.Pool); err != nil {
		t.Fatalf("Check after Up: %v", err)
	}
}

// Several migrators started together all succeed and apply each version
// exactly once.
func TestUpConcurrent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.NewEmpty(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make([]error, n)
	counts := make([]int, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each migrator has its own pool, as separate processes would.
			pool, err := pgxpool.New(ctx, db.URL)
			if err != nil {
				errs[i] = err
				return
			}
			defer pool.Close()
			applied, err := schema.Up(ctx, pool, 30*time.Second)
			counts[i], errs[i] = len(applied), err
		}()
	}
	wg.Wait()
	total := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("migrator %d: %v", i, errs[i])
		}
		total += counts[i]
	}
	if total != int(schema.Latest()) {
		t.Fatalf("migrators applied %d migrations between them, want %d", total, schema.Latest())
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+schema.LedgerTable+` WHERE version_id > 0`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != int(schema.Latest()) {
		t.Fatalf("ledger has %d version rows, want %d", rows, schema.Latest())
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	future := schema.Latest() + 7
	if _, err := db.Pool.Exec(ctx, `INSERT INTO `+schema.LedgerTable+` (version_id, is_applied) VALUES ($1, true)`, future); err != nil {
		t.Fatal(err)
	}
	err := schema.Check(ctx, db.Pool)
	var ve *schema.VersionError
	if !errors.Is(err, schema.ErrSchemaTooNew) || !errors.As(err, &ve) {
		t.Fatalf("Check = %v, want ErrSchemaTooNew", err)
	}
	for _, want := range []string{fmt.Sprint(future), fmt.Sprint(schema.Latest())} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name version %s", err, want)
		}
	}
	if _, err := schema.Up(ctx, db.Pool, 0); !errors.Is(err, schema.ErrSchemaTooNew) {
		t.Fatalf("Up on a newer schema = %v, want ErrSchemaTooNew", err)
	}
}

// Every CHECK constraint rejects a bad value. Each case starts from valid
// rows and makes one column bad.
func TestCheckConstraints(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	const (
		flow = "01890000-0000-7000-8000-000000000001"
		exA  = "01890000-0000-7000-8000-00000000000a"
		exB  = "01890000-0000-7000-8000-00000000000b"
	)
	seed := []string{
		`INSERT INTO ff_flow (partition_key, flow_id) VALUES (1, '` + flow + `')`,
		`INSERT INTO ff_execution (partition_key, execution_id, flow_id, lane, state) VALUES (1, '` + exA + `', '` + flow + `', 'l', 'pending')`,
		`INSERT INTO ff_execution (partition_key, execution_id, flow_id, lane, state) VALUES (1, '` + exB + `', '` + flow + `', 'l', 'blocked')`,
		`INSERT INTO ff_edge (partition_key, flow_id, edge_id, upstream_id, downstream_id) VALUES (1, '` + flow + `', gen_random_uuid(), '` + exA + `', '` + exB + `')`,
		`INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, total) VALUES (1, '` + flow + `', '` + exB + `', 1)`,
	}
	for _, q := range seed {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("seed %s: %v", q, err)
		}
	}
	execA := `UPDATE ff_execution SET %s WHERE execution_id = '` + exA + `'`
	group := `UPDATE ff_edge_group SET %s WHERE downstream_id = '` + exB + `'`
	edge := `UPDATE ff_edge SET %s WHERE downstream_id = '` + exB + `'`
	tests := []struct{ name, sql string }{
		{"flow partition", `INSERT INTO ff_flow (partition_key, flow_id) VALUES (256, gen_random_uuid())`},
		{"flow state", `UPDATE ff_flow SET state = 'done'`},
		{"flow terminal_at", `UPDATE ff_flow SET state = 'completed'`},
		{"flow cancel policy", `UPDATE ff_flow SET state = 'cancelled', terminal_at = now()`},
		{"flow policy value", `UPDATE ff_flow SET state = 'cancelled', terminal_at = now(), cancellation_policy = 'everything'`},
		{"flow graph_revision", `UPDATE ff_flow SET graph_revision = -1`},
		{"flow tags", `UPDATE ff_flow SET tags = '[]'`},
		{"execution state", fmt.Sprintf(execA, `state = 'waiting'`)},
		{"execution lane chars", fmt.Sprintf(execA, `lane = 'bad lane'`)},
		{"execution lane length", fmt.Sprintf(execA, `lane = repeat('a', 129)`)},
		{"execution running without lease", fmt.Sprintf(execA, `state = 'running'`)},
		{"execution lease while pending", fmt.Sprintf(execA, `lease_owner = 'w', lease_expires_at = now()`)},
		{"execution terminal without terminal_at", fmt.Sprintf(execA, `state = 'completed'`)},
		{"execution cancelled without reason", fmt.Sprintf(execA, `state = 'cancelled', terminal_at = now()`)},
		{"execution result when not completed", fmt.Sprintf(execA, `result = 'x'`)},
		{"execution started without attempt", fmt.Sprintf(execA, `started_at = now()`)},
		{"execution max_attempts", fmt.Sprintf(execA, `max_attempts = 0`)},
		{"execution lease_ttl", fmt.Sprintf(execA, `lease_ttl = '0 seconds'`)},
		{"execution attempt_timeout", fmt.Sprintf(execA, `attempt_timeout = '-1 second'`)},
		{"execution backoff", fmt.Sprintf(execA, `backoff_max = '1 millisecond'`)},
		{"execution jitter", fmt.Sprintf(execA, `backoff_jitter = 2`)},
		{"execution backoff base", fmt.Sprintf(execA, `backoff_base = '0 seconds'`)},
		{"execution multiplier", fmt.Sprintf(execA, `backoff_multiplier = 0.5`)},
		{"execution tags", fmt.Sprintf(execA, `tags = '[]'`)},
		{"execution new max_attempts", `INSERT INTO ff_execution (partition_key, execution_id, lane, state, max_attempts) VALUES (2, gen_random_uuid(), 'l', 'pending', 1001)`},
		{"execution new lease_ttl", `INSERT INTO ff_execution (partition_key, execution_id, lane, state, lease_ttl) VALUES (2, gen_random_uuid(), 'l', 'pending', '2 days')`},
		{"execution idempotency key", fmt.Sprintf(execA, `idempotency_key = ''`)},
		{"execution blocked outside flow", `INSERT INTO ff_execution (partition_key, execution_id, lane, state) VALUES (2, gen_random_uuid(), 'l', 'blocked')`},
		{"execution member on another partition", `INSERT INTO ff_execution (partition_key, execution_id, flow_id, lane, state) VALUES (2, gen_random_uuid(), '` + flow + `', 'l', 'pending')`},
		{"attempt outcome", `INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, ended_at, outcome) VALUES (1, '` + exA + `', 1, 1, 'w', now(), 'retry')`},
		{"attempt ended without outcome", `INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, ended_at) VALUES (1, '` + exA + `', 1, 1, 'w', now())`},
		{"edge state", fmt.Sprintf(edge, `state = 'done'`)},
		{"edge self", fmt.Sprintf(edge, `upstream_id = downstream_id`)},
		{"edge resolved without outcome", fmt.Sprintf(edge, `state = 'resolved', applied_at = now(), resolved_at = now()`)},
		{"edge outcome", fmt.Sprintf(edge, `state = 'resolved', applied_at = now(), resolved_at = now(), resolved_outcome = 'ok'`)},
		{"group policy", fmt.Sprintf(group, `policy = 'most_of'`)},
		{"group quorum without k", fmt.Sprintf(group, `policy = 'quorum', on_satisfied = 'let_run'`)},
		{"group quorum k zero", fmt.Sprintf(group, `policy = 'quorum', k = 0, on_satisfied = 'let_run'`)},
		{"group any_of without on_satisfied", fmt.Sprintf(group, `policy = 'any_of'`)},
		{"group on_satisfied value", fmt.Sprintf(group, `policy = 'any_of', on_satisfied = 'cancel_all'`)},
		{"group counts over total", fmt.Sprintf(group, `success_count = 1, fail_count = 1`)},
		{"group decision", fmt.Sprintf(group, `decision = 'maybe', decided_at = now()`)},
		{"group decided_at", fmt.Sprintf(group, `decision = 'satisfied'`)},
		{"completion outcome", `INSERT INTO ff_completion_event (partition_key, execution_id, outcome) VALUES (1, '` + exA + `', 'completed')`},
		{"flow completion outcome", `INSERT INTO ff_completion_event (partition_key, flow_id, outcome) VALUES (1, '` + flow + `', 'success')`},
		{"lease event type", `INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type) VALUES (1, '` + exA + `', 1, 1, 'w', 'stolen')`},
		{"consumer stream", `INSERT INTO ff_outbox_consumer (name, stream) VALUES ('c', 'everything')`},
		{"consumer name", `INSERT INTO ff_outbox_consumer (name, stream) VALUES ('bad name', 'all')`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := inRolledBackTx(ctx, db.Pool, tt.sql)
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || (pgErr.Code != "23514" && pgErr.Code != "23503") {
				t.Fatalf("%s: got %v, want a check (23514) or foreign key (23503) violation", tt.sql, err)
			}
		})
	}
	// One completion event per execution, enforced by the database.
	dup := `INSERT INTO ff_completion_event (partition_key, execution_id, outcome) VALUES (1, '` + exA + `', 'success')`
	if _, err := db.Pool.Exec(ctx, dup); err != nil {
		t.Fatal(err)
	}
	var pgErr *pgconn.PgError
	if _, err := db.Pool.Exec(ctx, dup); !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "ff_completion_event_execution" {
		t.Fatalf("second completion event for one execution: %v, want a unique violation of ff_completion_event_execution", err)
	}
	// Its index leads with the id, so that a new event's entry lands at
	// the right edge (migration 00039), not in one of 256 places.
	var def string
	if err := db.Pool.QueryRow(ctx, `SELECT pg_get_indexdef('ff_completion_event_execution'::regclass)`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(def, "(execution_id, partition_key) WHERE (execution_id IS NOT NULL)") {
		t.Fatalf("ff_completion_event_execution is %q, want it on (execution_id, partition_key) of events with an execution", def)
	}
}

func inRolledBackTx(ctx context.Context, pool *pgxpool.Pool, sql string) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, sql)
	if err == nil && tag.RowsAffected() == 0 {
		return errors.New("statement matched no row: the case is wrong")
	}
	return err
}
