package leases

import (
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// RetryPolicy is exponential backoff with a cap and jitter: attempt n that
// fails waits min(Base·Multiplier^(n-1), Max), then ±Jitter of that.
type RetryPolicy struct {
	Base       time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64
}

// Execution is one execution row.
type Execution struct {
	ID                   ident.ExecutionID
	FlowID               *uuid.UUID
	Namespace            string
	Lane                 string
	Kind                 string
	Priority             int
	RequiredCapabilities []string
	State                store.State
	RunAt                time.Time
	Attempt              int
	MaxAttempts          int
	Retry                RetryPolicy
	LeaseEpoch           int64
	LeaseOwner           string
	LeaseExpiresAt       *time.Time
	LeaseTTL             time.Duration
	AttemptTimeout       time.Duration
	AttemptDeadlineAt    *time.Time
	DeadlineAt           *time.Time
	Payload              []byte
	Result               []byte
	LastError            string
	IdempotencyKey       string
	CreatedAt            time.Time
	StartedAt            *time.Time
	TerminalAt           *time.Time
	CancellationReason   string
	CancelledBy          string
	Tags                 map[string]any
}

// execColumns is the select list scanExecution reads, for a row aliased e.
const execColumns = `e.partition_key, e.execution_id, e.flow_id, e.namespace, e.lane, e.kind, e.priority,
	e.required_capabilities, e.state, e.run_at, e.attempt, e.max_attempts,
	(extract(epoch FROM e.backoff_base) * 1e6)::bigint, (extract(epoch FROM e.backoff_max) * 1e6)::bigint,
	e.backoff_multiplier, e.backoff_jitter, e.lease_epoch, e.lease_owner, e.lease_expires_at,
	(extract(epoch FROM e.lease_ttl) * 1e6)::bigint, (extract(epoch FROM e.attempt_timeout) * 1e6)::bigint,
	e.attempt_deadline_at, e.deadline_at, e.payload, e.result, e.last_error, e.idempotency_key,
	e.created_at, e.started_at, e.terminal_at, e.cancellation_reason, e.cancelled_by, e.tags`

func scanExecution(row pgx.Row) (*Execution, error) {
	var (
		x                               Execution
		base, maxB, ttl                 int64
		timeout                         *int64
		owner, lastErr, key, reason, by *string
		state                           string
	)
	err := row.Scan(&x.ID.Partition, &x.ID.UUID, &x.FlowID, &x.Namespace, &x.Lane, &x.Kind, &x.Priority,
		&x.RequiredCapabilities, &state, &x.RunAt, &x.Attempt, &x.MaxAttempts,
		&base, &maxB, &x.Retry.Multiplier, &x.Retry.Jitter, &x.LeaseEpoch, &owner, &x.LeaseExpiresAt,
		&ttl, &timeout, &x.AttemptDeadlineAt, &x.DeadlineAt, &x.Payload, &x.Result, &lastErr, &key,
		&x.CreatedAt, &x.StartedAt, &x.TerminalAt, &reason, &by, &x.Tags)
	if err != nil {
		return nil, err
	}
	x.State = store.State(state)
	x.Retry.Base = time.Duration(base) * time.Microsecond
	x.Retry.Max = time.Duration(maxB) * time.Microsecond
	x.LeaseTTL = time.Duration(ttl) * time.Microsecond
	if timeout != nil {
		x.AttemptTimeout = time.Duration(*timeout) * time.Microsecond
	}
	x.LeaseOwner, x.LastError, x.IdempotencyKey = deref(owner), deref(lastErr), deref(key)
	x.CancellationReason, x.CancelledBy = deref(reason), deref(by)
	return &x, nil
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
