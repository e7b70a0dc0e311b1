package ffd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Config configures a Client. The zero value is usable.
type Config struct {
	// Namespace applies to calls that name none. Default DefaultNamespace.
	Namespace string
	// MaxPayloadBytes bounds an execution's payload and its result.
	// Default DefaultMaxPayloadBytes (1 MiB); at most MaxMaxPayloadBytes.
	MaxPayloadBytes int
	// Logger receives the client's and its workers' logs. Default: Info
	// and above to stderr (JSON, or console on a terminal); pass
	// zap.NewNop() for none.
	Logger *zap.Logger
	// StallWarning: when a completion event has waited this long for a
	// daemon, the client (after submitting a flow) and its workers log a
	// warning, since flows do not advance without one. Default
	// DefaultStallWarning (1 min); negative: never check.
	StallWarning time.Duration
	// Metrics, when set, receives ffd_dispatch_lag_seconds (the wait of
	// the oldest undispatched completion event, as last checked). Default:
	// none.
	Metrics prometheus.Registerer
	// TracerProvider, when set, traces executions with OpenTelemetry: the
	// span context of the code that enqueues one is stored with it (tag
	// TraceTag), and its workers run each handler in a span that continues
	// that trace. Default: none, at no cost.
	TracerProvider trace.TracerProvider
	// WaitPollInterval is how often WaitExecution and WaitFlow read their
	// object again when no notification woke them: 10ms..1h. Default
	// DefaultWaitPollInterval.
	WaitPollInterval time.Duration
	// ListenConnConfig is the connection the client LISTENs on while a
	// wait (WaitExecution, WaitFlow) runs: one for all its waits, opened
	// by the first and closed after the last. Default: one like the
	// pool's. Behind a PgBouncer in transaction pooling, point it at
	// Postgres directly; otherwise waits learn of results only at each
	// WaitPollInterval.
	ListenConnConfig *pgx.ConnConfig
}

// Client is the entry point of the Go API. It is safe for concurrent use.
type Client struct {
	pool    *pgxpool.Pool
	cfg     Config
	limits  leases.Limits
	stall   *stallWatch
	tracing tracing
	waits   waitHub
}

// NewClient builds a client over pool. cfg may be nil for the defaults. It
// does not check the schema version; `ffd migrate up` must have run.
func NewClient(pool *pgxpool.Pool, cfg *Config) (*Client, error) {
	if pool == nil {
		return nil, errors.New("ffd: NewClient needs a pool")
	}
	c := &Client{pool: pool}
	c.waits.client = c
	if cfg != nil {
		c.cfg = *cfg
	}
	if err := leases.NormalizeNamespace(&c.cfg.Namespace); err != nil {
		return nil, err
	}
	if c.cfg.MaxPayloadBytes < 0 || c.cfg.MaxPayloadBytes > MaxMaxPayloadBytes {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "max_payload_bytes", strconv.Itoa(c.cfg.MaxPayloadBytes),
			fmt.Sprintf("want 0 (the default, %d) up to %d", DefaultMaxPayloadBytes, MaxMaxPayloadBytes))
	}
	if c.cfg.MaxPayloadBytes == 0 {
		c.cfg.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.cfg.Logger == nil {
		c.cfg.Logger = defaultLogger()
	}
	c.limits = leases.Limits{MaxPayloadBytes: c.cfg.MaxPayloadBytes}
	switch {
	case c.cfg.WaitPollInterval == 0:
		c.cfg.WaitPollInterval = DefaultWaitPollInterval
	case c.cfg.WaitPollInterval < 10*time.Millisecond || c.cfg.WaitPollInterval > time.Hour:
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "wait_poll_interval", c.cfg.WaitPollInterval.String(), "want 10ms..1h")
	}
	if c.cfg.StallWarning == 0 {
		c.cfg.StallWarning = DefaultStallWarning
	}
	c.tracing = newTracing(c.cfg.TracerProvider)
	var err error
	if c.stall, err = newStallWatch(c.cfg.StallWarning, c.cfg.Logger, c.cfg.Metrics); err != nil {
		return nil, fmt.Errorf("ffd: register metrics: %w", err)
	}
	return c, nil
}

// Pool is the pool the client runs on.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// Create creates an execution, pending from now (or after Delay). With an
// IdempotencyKey already used in the namespace it returns the existing one.
func (c *Client) Create(ctx context.Context, p CreateParams) (*CreateResult, error) {
	return c.create(ctx, c.pool, p)
}

// CreateTx is Create inside tx.
func (c *Client) CreateTx(ctx context.Context, tx pgx.Tx, p CreateParams) (*CreateResult, error) {
	return c.create(ctx, tx, p)
}

func (c *Client) create(ctx context.Context, db store.DB, p CreateParams) (*CreateResult, error) {
	n, err := leases.Normalize(c.own(ctx, p), leases.Placement{}, c.limits)
	if err != nil {
		return nil, err
	}
	x, existed, folds, err := leases.InsertFolding(ctx, db, n)
	if err != nil {
		return nil, err
	}
	return &CreateResult{Execution: x, Existed: existed, Folds: folds}, nil
}

// MaxCreateMany bounds one CreateMany call.
const MaxCreateMany = leases.MaxCreateMany

// CreateMany creates executions in one statement and returns them in the
// order of ps: the fast way to enqueue many. Every row is validated before
// anything is written, and one invalid row rejects the whole batch.
// Idempotency keys are refused (a batch that half exists is not a thing a
// caller can reason about: use Create for those). At most MaxCreateMany
// rows per call.
func (c *Client) CreateMany(ctx context.Context, ps []CreateParams) ([]*Execution, error) {
	return c.createMany(ctx, c.pool, ps)
}

// CreateManyTx is CreateMany inside tx: the executions exist once tx
// commits, together with the caller's own writes.
func (c *Client) CreateManyTx(ctx context.Context, tx pgx.Tx, ps []CreateParams) ([]*Execution, error) {
	return c.createMany(ctx, tx, ps)
}

func (c *Client) createMany(ctx context.Context, db store.DB, ps []CreateParams) ([]*Execution, error) {
	if len(ps) > MaxCreateMany {
		return nil, fault.Invalid(ffdtype.KindTooLarge, "executions", strconv.Itoa(len(ps)), fmt.Sprintf("at most %d per CreateMany", MaxCreateMany))
	}
	ips := make([]ffdtype.CreateParams, len(ps))
	for i, p := range ps {
		ips[i] = c.own(ctx, p)
	}
	xs, err := leases.CreateMany(ctx, db, c.limits, ips)
	if err != nil {
		return nil, err
	}
	return xs, nil
}

// Claim leases up to p.Max due executions of p.Lane.
func (c *Client) Claim(ctx context.Context, p ClaimParams) ([]*Execution, error) {
	return c.claim(ctx, c.pool, p)
}

// ClaimTx is Claim inside tx.
func (c *Client) ClaimTx(ctx context.Context, tx pgx.Tx, p ClaimParams) ([]*Execution, error) {
	return c.claim(ctx, tx, p)
}

func (c *Client) claim(ctx context.Context, db store.DB, p ClaimParams) ([]*Execution, error) {
	if p.Max == 0 {
		p.Max = 1
	}
	xs, err := leases.Claim(ctx, db, p)
	if err != nil {
		return nil, err
	}
	return xs, nil
}

// Renew extends the lease held at epoch; it returns the new expiry (by the
// database clock) or an error matching ErrLeaseLost.
func (c *Client) Renew(ctx context.Context, id ExecutionID, epoch int64) (*RenewResult, error) {
	return c.renew(ctx, c.pool, id, epoch)
}

// RenewTx is Renew inside tx.
func (c *Client) RenewTx(ctx context.Context, tx pgx.Tx, id ExecutionID, epoch int64) (*RenewResult, error) {
	return c.renew(ctx, tx, id, epoch)
}

// RenewResult is a renewed lease.
type RenewResult struct {
	// LeaseExpiresAt is the lease's new expiry, by the database clock.
	LeaseExpiresAt time.Time
}

func (c *Client) renew(ctx context.Context, db store.DB, id ExecutionID, epoch int64) (*RenewResult, error) {
	exp, err := leases.Renew(ctx, db, id, epoch)
	if err != nil {
		return nil, err
	}
	return &RenewResult{LeaseExpiresAt: exp}, nil
}

// Complete ends the execution held at epoch as completed with result.
// Repeated after it succeeded, it returns the stored outcome (Repeated).
// epoch must be the one the claim returned (1 or more): an epoch of 0 is a
// ValidationError, never an unfenced completion. result is at most
// Config.MaxPayloadBytes.
func (c *Client) Complete(ctx context.Context, id ExecutionID, epoch int64, result []byte) (*Ending, error) {
	return leases.Complete(ctx, c.pool, c.limits, id, epoch, result)
}

// CompleteTx is Complete inside tx.
func (c *Client) CompleteTx(ctx context.Context, tx pgx.Tx, id ExecutionID, epoch int64, result []byte) (*Ending, error) {
	return leases.Complete(ctx, tx, c.limits, id, epoch, result)
}

// Fail ends the attempt held at epoch as failed: retried after backoff when
// p.Retryable and attempts remain, else the execution fails.
func (c *Client) Fail(ctx context.Context, id ExecutionID, epoch int64, p FailParams) (*Ending, error) {
	return leases.Fail(ctx, c.pool, id, epoch, p)
}

// FailTx is Fail inside tx.
func (c *Client) FailTx(ctx context.Context, tx pgx.Tx, id ExecutionID, epoch int64, p FailParams) (*Ending, error) {
	return leases.Fail(ctx, tx, id, epoch, p)
}

// Cancel cancels a non-terminal execution (fencing a running one). A
// repeat is a no-op success; other terminal states give an
// *AlreadyTerminalError.
func (c *Client) Cancel(ctx context.Context, id ExecutionID, reason, by string) (*Ending, error) {
	return leases.Cancel(ctx, c.pool, id, reason, by)
}

// CancelTx is Cancel inside tx.
func (c *Client) CancelTx(ctx context.Context, tx pgx.Tx, id ExecutionID, reason, by string) (*Ending, error) {
	return leases.Cancel(ctx, tx, id, reason, by)
}

// Revoke takes the lease of a running execution away (operator action):
// it is pending again at once and its holder is fenced.
func (c *Client) Revoke(ctx context.Context, id ExecutionID, reason string) (*Requeued, error) {
	return leases.Revoke(ctx, c.pool, id, reason)
}

// RevokeTx is Revoke inside tx.
func (c *Client) RevokeTx(ctx context.Context, tx pgx.Tx, id ExecutionID, reason string) (*Requeued, error) {
	return leases.Revoke(ctx, tx, id, reason)
}

// Get reads one execution.
func (c *Client) Get(ctx context.Context, id ExecutionID) (*Execution, error) {
	return leases.Get(ctx, c.pool, id)
}

// GetByUUID reads the execution with this uuid whatever its partition:
// the bare uuid a person copies from a log or a URL. (ParseExecutionID
// needs the full "{fp:N}:<uuid>" form, which names the partition.) It
// returns a *NotFoundError when none has it, and a *ValidationError in
// the unlikely case that executions on several partitions do.
func (c *Client) GetByUUID(ctx context.Context, id uuid.UUID) (*Execution, error) {
	return leases.GetByUUID(ctx, c.pool, id)
}

// GetTx is Get inside tx.
func (c *Client) GetTx(ctx context.Context, tx pgx.Tx, id ExecutionID) (*Execution, error) {
	return leases.Get(ctx, tx, id)
}

// List pages through executions in creation order.
func (c *Client) List(ctx context.Context, p ListParams) (*ListPage, error) {
	return c.list(ctx, c.pool, p)
}

// ListTx is List inside tx.
func (c *Client) ListTx(ctx context.Context, tx pgx.Tx, p ListParams) (*ListPage, error) {
	return c.list(ctx, tx, p)
}

func (c *Client) list(ctx context.Context, db store.DB, p ListParams) (*ListPage, error) {
	return leases.List(ctx, db, p)
}
