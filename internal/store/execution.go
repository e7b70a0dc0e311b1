package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// execColumns is the select list of an Execution, for a row aliased e;
// executionRow receives it by column name.
const execColumns = `e.partition_key, e.execution_id, e.flow_id, e.namespace, e.lane, e.kind, e.priority,
	e.required_capabilities, e.state, e.run_at, e.attempt, e.max_attempts,
	(extract(epoch FROM e.backoff_base) * 1e6)::bigint AS backoff_base_us,
	(extract(epoch FROM e.backoff_max) * 1e6)::bigint AS backoff_max_us,
	e.backoff_multiplier, e.backoff_jitter, e.lease_epoch, e.lease_owner, e.lease_expires_at,
	(extract(epoch FROM e.lease_ttl) * 1e6)::bigint AS lease_ttl_us,
	(extract(epoch FROM e.attempt_timeout) * 1e6)::bigint AS attempt_timeout_us,
	e.attempt_deadline_at, e.deadline_at, e.payload, e.result, e.last_error, e.idempotency_key,
	e.created_at, e.started_at, e.terminal_at, e.cancellation_reason, e.cancelled_by, e.tags, e.step, e.rerun_of,
	e.concurrency_key`

// executionRow is one row of execColumns, its fields in the columns'
// order (TestExecutionRowMatchesColumns holds the two together).
type executionRow struct {
	PartitionKey         int16          `db:"partition_key"`
	ExecutionID          uuid.UUID      `db:"execution_id"`
	FlowID               pgtype.UUID    `db:"flow_id"`
	Namespace            string         `db:"namespace"`
	Lane                 string         `db:"lane"`
	Kind                 string         `db:"kind"`
	Priority             int            `db:"priority"`
	RequiredCapabilities []string       `db:"required_capabilities"`
	State                ffdtype.State  `db:"state"`
	RunAt                time.Time      `db:"run_at"`
	Attempt              int            `db:"attempt"`
	MaxAttempts          int            `db:"max_attempts"`
	BackoffBaseUS        int64          `db:"backoff_base_us"`
	BackoffMaxUS         int64          `db:"backoff_max_us"`
	BackoffMultiplier    float64        `db:"backoff_multiplier"`
	BackoffJitter        float64        `db:"backoff_jitter"`
	LeaseEpoch           int64          `db:"lease_epoch"`
	LeaseOwner           *string        `db:"lease_owner"`
	LeaseExpiresAt       *time.Time     `db:"lease_expires_at"`
	LeaseTTLUS           int64          `db:"lease_ttl_us"`
	AttemptTimeoutUS     *int64         `db:"attempt_timeout_us"`
	AttemptDeadlineAt    *time.Time     `db:"attempt_deadline_at"`
	DeadlineAt           *time.Time     `db:"deadline_at"`
	Payload              []byte         `db:"payload"`
	Result               []byte         `db:"result"`
	LastError            *string        `db:"last_error"`
	IdempotencyKey       *string        `db:"idempotency_key"`
	CreatedAt            time.Time      `db:"created_at"`
	StartedAt            *time.Time     `db:"started_at"`
	TerminalAt           *time.Time     `db:"terminal_at"`
	CancellationReason   *string        `db:"cancellation_reason"`
	CancelledBy          *string        `db:"cancelled_by"`
	Tags                 map[string]any `db:"tags"`
	Step                 *string        `db:"step"`
	RerunOf              pgtype.UUID    `db:"rerun_of"`
	ConcurrencyKey       *string        `db:"concurrency_key"`
}

// dests are r's fields in execColumns' order, for a positional scan: a
// scan by name (pgx.RowToStructByName) matched 35 names by reflection for
// every row, about a sixth of a worker's own CPU at 400 slots (pprof).
// The uuids scan as pgx's own types: a uuid.UUID goes through its
// sql.Scanner, by way of text.
func (r *executionRow) dests() []any {
	return []any{&r.PartitionKey, (*[16]byte)(&r.ExecutionID), &r.FlowID, &r.Namespace, &r.Lane, &r.Kind, &r.Priority,
		&r.RequiredCapabilities, &r.State, &r.RunAt, &r.Attempt, &r.MaxAttempts,
		&r.BackoffBaseUS, &r.BackoffMaxUS,
		&r.BackoffMultiplier, &r.BackoffJitter, &r.LeaseEpoch, &r.LeaseOwner, &r.LeaseExpiresAt,
		&r.LeaseTTLUS, &r.AttemptTimeoutUS,
		&r.AttemptDeadlineAt, &r.DeadlineAt, &r.Payload, &r.Result, &r.LastError, &r.IdempotencyKey,
		&r.CreatedAt, &r.StartedAt, &r.TerminalAt, &r.CancellationReason, &r.CancelledBy, &r.Tags, &r.Step, &r.RerunOf,
		&r.ConcurrencyKey}
}

// uuidOrNil is u, or nil when it is NULL.
func uuidOrNil(u pgtype.UUID) *uuid.UUID {
	if !u.Valid {
		return nil
	}
	id := uuid.UUID(u.Bytes)
	return &id
}

func (r *executionRow) execution() *ffdtype.Execution {
	x := &ffdtype.Execution{
		ID:                   ffdtype.ExecutionID{Partition: r.PartitionKey, UUID: r.ExecutionID},
		FlowID:               uuidOrNil(r.FlowID),
		Namespace:            r.Namespace,
		Lane:                 r.Lane,
		Kind:                 r.Kind,
		Priority:             r.Priority,
		RequiredCapabilities: r.RequiredCapabilities,
		Version:              ffdtype.VersionOf(r.RequiredCapabilities),
		State:                r.State,
		RunAt:                r.RunAt,
		Attempt:              r.Attempt,
		MaxAttempts:          r.MaxAttempts,
		Retry: ffdtype.RetryPolicy{
			Base:       time.Duration(r.BackoffBaseUS) * time.Microsecond,
			Max:        time.Duration(r.BackoffMaxUS) * time.Microsecond,
			Multiplier: r.BackoffMultiplier,
			Jitter:     r.BackoffJitter,
		},
		LeaseEpoch:         r.LeaseEpoch,
		LeaseOwner:         deref(r.LeaseOwner),
		LeaseExpiresAt:     r.LeaseExpiresAt,
		LeaseTTL:           time.Duration(r.LeaseTTLUS) * time.Microsecond,
		AttemptDeadlineAt:  r.AttemptDeadlineAt,
		DeadlineAt:         r.DeadlineAt,
		Payload:            r.Payload,
		Result:             r.Result,
		LastError:          deref(r.LastError),
		IdempotencyKey:     deref(r.IdempotencyKey),
		CreatedAt:          r.CreatedAt,
		StartedAt:          r.StartedAt,
		TerminalAt:         r.TerminalAt,
		CancellationReason: deref(r.CancellationReason),
		CancelledBy:        deref(r.CancelledBy),
		Tags:               r.Tags,
		Step:               deref(r.Step),
		RerunOf:            uuidOrNil(r.RerunOf),
		ConcurrencyKey:     deref(r.ConcurrencyKey),
	}
	if r.AttemptTimeoutUS != nil {
		x.AttemptTimeout = time.Duration(*r.AttemptTimeoutUS) * time.Microsecond
	}
	return x
}

// scanExecution reads one Execution from rows positioned on a row of
// execColumns.
func scanExecution(row pgx.CollectableRow) (*ffdtype.Execution, error) {
	var r executionRow
	if err := row.Scan(r.dests()...); err != nil {
		return nil, err
	}
	return r.execution(), nil
}

// collectExecutions reads every row of rows (execColumns) and closes it.
func collectExecutions(rows pgx.Rows) ([]*ffdtype.Execution, error) {
	return pgx.CollectRows(rows, scanExecution)
}

// queryExecutions reads every row of a query's result (execColumns).
func queryExecutions(rows pgx.Rows, err error) ([]*ffdtype.Execution, error) {
	if err != nil {
		return nil, err
	}
	return collectExecutions(rows)
}

// oneExecution reads the single row of rows (execColumns), or
// pgx.ErrNoRows.
func oneExecution(rows pgx.Rows, err error) (*ffdtype.Execution, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanExecution)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func micros(d time.Duration) int64 { return d.Microseconds() }

// GetExecution reads one execution, or returns pgx.ErrNoRows.
func GetExecution(ctx context.Context, db DB, id ffdtype.ExecutionID) (*ffdtype.Execution, error) {
	return oneExecution(db.Query(ctx, getExecutionSQL, id.Partition, id.UUID))
}

// ExecutionsByUUID reads the executions with this uuid on any partition
// (the primary key leads with the id, migration 00020): one, unless uuids
// were minted twice.
func ExecutionsByUUID(ctx context.Context, db DB, id uuid.UUID) ([]*ffdtype.Execution, error) {
	rows, err := db.Query(ctx, `SELECT `+execColumns+` FROM ff_execution e WHERE e.execution_id = $1 LIMIT 2`, id)
	if err != nil {
		return nil, err
	}
	return collectExecutions(rows)
}

// ExecutionFilter selects executions for ListExecutions; zero fields do
// not filter.
type ExecutionFilter struct {
	Namespace string
	Lane      string
	State     ffdtype.State
	Kind      string
	FlowID    *uuid.UUID
	// Search, when set, keeps the executions whose kind or step begins
	// with it.
	Search string
	After  *uuid.UUID // keyset cursor: ids after this one (before it when Newest)
	Limit  int        // rows to return, ≥ 1
	Newest bool       // newest first; false: oldest first
}

// ListExecutions returns up to f.Limit executions in id order, or newest
// first; each order is its own statement, reading the primary key (id first) in
// its direction.
func ListExecutions(ctx context.Context, db DB, f ExecutionFilter) ([]*ffdtype.Execution, error) {
	const where = `WHERE ($1::text IS NULL OR e.namespace = $1)
			AND ($2::text IS NULL OR e.lane = $2)
			AND ($3::text IS NULL OR e.state = $3)
			AND ($4::uuid IS NULL OR e.flow_id = $4)
			AND ($7::text IS NULL OR e.kind = $7)
			AND ($8::text IS NULL OR starts_with(e.kind, $8) OR starts_with(e.step, $8))`
	sql := `SELECT ` + execColumns + ` FROM ff_execution e ` + where + `
			AND ($5::uuid IS NULL OR e.execution_id > $5)
		ORDER BY e.execution_id LIMIT $6`
	if f.Newest {
		sql = `SELECT ` + execColumns + ` FROM ff_execution e ` + where + `
			AND ($5::uuid IS NULL OR e.execution_id < $5)
		ORDER BY e.execution_id DESC LIMIT $6`
	}
	rows, err := db.Query(ctx, sql,
		nullIfEmpty(f.Namespace), nullIfEmpty(f.Lane), nullIfEmpty(string(f.State)), f.FlowID, f.After, f.Limit, nullIfEmpty(f.Kind), nullIfEmpty(f.Search))
	if err != nil {
		return nil, wrap("list executions", err)
	}
	xs, err := collectExecutions(rows)
	return xs, wrap("list executions", err)
}

// ExecutionFlow reads the flow an execution belongs to (nil outside any
// flow), or returns pgx.ErrNoRows.
func ExecutionFlow(ctx context.Context, db DB, id ffdtype.ExecutionID) (*uuid.UUID, error) {
	var flowID *uuid.UUID
	err := db.QueryRow(ctx, `SELECT flow_id FROM ff_execution WHERE partition_key = $1 AND execution_id = $2`,
		id.Partition, id.UUID).Scan(&flowID)
	return flowID, err
}

const getExecutionSQL = `SELECT ` + execColumns + ` FROM ff_execution e
		WHERE e.partition_key = $1 AND e.execution_id = $2`
