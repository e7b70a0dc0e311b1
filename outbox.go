package ffd

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// OutboxStream selects the outbox tables a consumer reads.
type OutboxStream string

// Streams.
const (
	// StreamCompletion is ff_completion_event: terminal outcomes.
	StreamCompletion OutboxStream = "completion"
	// StreamLease is ff_lease_event: lease acquired, renewed, released,
	// expired, revoked.
	StreamLease OutboxStream = "lease"
	// StreamAll is both, in one order.
	StreamAll OutboxStream = "all"
)

// OutboxEvent is one row of ff_completion_event or ff_lease_event. JSON
// names are the schema's and are stable (docs/consumers.md).
type OutboxEvent struct {
	// Stream is the table the event came from: completion or lease.
	Stream OutboxStream `json:"stream"`
	// EventID is unique and increasing within one stream.
	EventID int64 `json:"event_id"`
	// TxID is the writing transaction's id; (TxID, EventID) is the
	// consumption order.
	TxID uint64 `json:"txid"`
	// PartitionKey is the partition of the execution or flow.
	PartitionKey int16 `json:"partition_key"`
	// ExecutionID is `{fp:N}:<uuid>`; empty for a flow's own event.
	ExecutionID string `json:"execution_id,omitempty"`
	// FlowID is the flow's uuid; empty outside any flow.
	FlowID string `json:"flow_id,omitempty"`
	// OccurredAt is the event's insertion time.
	OccurredAt time.Time `json:"occurred_at"`
	// Attempt is the execution's attempt.
	Attempt int `json:"attempt"`
	// Outcome, Step, Namespace and DispatchedAt are completion events'
	// only; Step is a flow member's step name.
	Outcome      string     `json:"outcome,omitempty"`
	Step         string     `json:"step,omitempty"`
	Namespace    string     `json:"namespace,omitempty"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	// EventType, LeaseEpoch, Worker and LeaseExpiresAt are lease events'
	// only.
	EventType      string     `json:"event_type,omitempty"`
	LeaseEpoch     int64      `json:"lease_epoch,omitempty"`
	Worker         string     `json:"worker,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
}

// Position is the cursor just at e: acknowledging it consumes e and
// everything before it.
func (e OutboxEvent) Position() OutboxCursor { return OutboxCursor{TxID: e.TxID, EventID: e.EventID} }

func eventsOf(es []store.Event) []OutboxEvent {
	out := make([]OutboxEvent, len(es))
	for i, e := range es {
		out[i] = OutboxEvent{
			Stream: OutboxStream(e.Stream), EventID: e.EventID, TxID: e.TxID, PartitionKey: e.PartitionKey,
			ExecutionID: e.ExecutionID, FlowID: e.FlowID, OccurredAt: e.OccurredAt, Attempt: e.Attempt,
			Outcome: e.Outcome, Step: e.Step, Namespace: e.Namespace, DispatchedAt: e.DispatchedAt,
			EventType: e.EventType, LeaseEpoch: e.LeaseEpoch, Worker: e.Worker, LeaseExpiresAt: e.LeaseExpiresAt,
		}
	}
	return out
}

// OutboxCursor is a position in (txid, event_id) order: everything at or
// before it has been consumed.
type OutboxCursor struct {
	TxID    uint64 `json:"txid"`
	EventID int64  `json:"event_id"`
}

// OutboxStart is where a new consumer begins.
type OutboxStart int

// Starts.
const (
	// FromStart reads every retained event.
	FromStart = OutboxStart(outbox.FromStart)
	// FromNow reads only events of transactions that start after the
	// consumer is registered.
	FromNow = OutboxStart(outbox.FromNow)
)

// OutboxConsumer is a named consumer and its cursor.
type OutboxConsumer struct {
	Name   string
	Stream OutboxStream
	Cursor OutboxCursor
}

func consumerOf(c *store.Consumer) *OutboxConsumer {
	return &OutboxConsumer{Name: c.Name, Stream: OutboxStream(c.Stream), Cursor: OutboxCursor(c.Cursor)}
}

// OutboxHandler processes a batch in the transaction that acknowledges
// it: writes it makes to this database commit with the acknowledgement.
// Returning an error rolls both back, and the batch is delivered again.
type OutboxHandler func(ctx context.Context, tx pgx.Tx, events []OutboxEvent) error

// WALHandler receives the events of one committed transaction, in commit
// order. An error stops the stream; the transaction is delivered again on
// the next start.
type WALHandler func(ctx context.Context, events []OutboxEvent) error

// WALConfig configures StreamWAL.
type WALConfig struct {
	// ConnString connects to the database (a normal URL or DSN; the
	// replication parameter is added). Required.
	ConnString string
	// Slot is the logical replication slot, created on first use; one per
	// consumer. Required: 1-63 of [a-z0-9_].
	Slot string
	// Handler is called once per committed transaction. Required.
	Handler WALHandler
	// StatusInterval: standby status updates when idle. Default 10 s.
	StatusInterval time.Duration
	// OnStart, when set, is called once streaming has started: every
	// transaction committed from then on will be delivered. (A new slot
	// holds only what commits after it was created; read older events with
	// the cursor protocol.)
	OnStart func()
	// Session is the connection's guard (keepalives above all: an idle
	// stream must still notice a vanished server). Default
	// DefaultSessionConfig().
	Session *SessionConfig
	// Logger: default none.
	Logger *zap.Logger
}

// ErrWALLevel is matched when the server is not running wal_level=logical.
var ErrWALLevel = outbox.ErrWALLevel

// ReadEvents returns up to limit committed events after the cursor, in
// (txid, event_id) order, never skipping one that commits later.
func (c *Client) ReadEvents(ctx context.Context, s OutboxStream, after OutboxCursor, limit int) ([]OutboxEvent, error) {
	es, err := outbox.Read(ctx, c.pool, store.Stream(s), store.Cursor(after), limit)
	if err != nil {
		return nil, err
	}
	return eventsOf(es), nil
}

// RegisterConsumer creates a named consumer (or returns the existing one,
// cursor kept).
func (c *Client) RegisterConsumer(ctx context.Context, name string, s OutboxStream, start OutboxStart) (*OutboxConsumer, error) {
	cons, err := outbox.Register(ctx, c.pool, name, store.Stream(s), outbox.Start(start))
	if err != nil {
		return nil, err
	}
	return consumerOf(cons), nil
}

// DropConsumer removes a named consumer; retention stops waiting for it.
func (c *Client) DropConsumer(ctx context.Context, name string) error {
	return outbox.Drop(ctx, c.pool, name)
}

// AckTx moves a consumer's cursor to cur inside tx, together with the
// consumer's own writes.
func (c *Client) AckTx(ctx context.Context, tx pgx.Tx, name string, cur OutboxCursor) error {
	return outbox.Ack(ctx, tx, name, store.Cursor(cur))
}

// ConsumeParams configures Consume; zero values take the defaults of
// internal/outbox (stream all, from start, batch 100, poll 1 s).
type ConsumeParams struct {
	// Name of the consumer, registered on first use. Required.
	Name string
	// Stream: default StreamAll.
	Stream OutboxStream
	// Start is where a new consumer begins: default FromStart.
	Start OutboxStart
	// Batch bounds the events per handler call: default 100.
	Batch int
	// PollInterval is the fallback when no notification arrives: default
	// 1 s.
	PollInterval time.Duration
	// Handler is called for each non-empty batch. Required.
	Handler OutboxHandler
}

// Consume follows the outbox for a named consumer until ctx ends: each
// batch is handed to the handler inside the transaction that advances the
// cursor, so a handler writing to this database processes each event
// exactly once. It wakes on NOTIFY and polls as a fallback.
func (c *Client) Consume(ctx context.Context, p ConsumeParams) error {
	var h outbox.Handler
	if p.Handler != nil {
		h = func(ctx context.Context, tx pgx.Tx, es []store.Event) error { return p.Handler(ctx, tx, eventsOf(es)) }
	}
	return outbox.Consume(ctx, outbox.ConsumeConfig{Pool: c.pool, Name: p.Name, Stream: store.Stream(p.Stream), Start: outbox.Start(p.Start),
		Batch: p.Batch, PollInterval: p.PollInterval, Handler: h, Logger: c.cfg.Logger})
}

// StreamWAL follows both outboxes in commit order through a logical
// replication slot, resuming from its confirmed position (at-least-once).
func StreamWAL(ctx context.Context, cfg WALConfig) error {
	wc := outbox.WALConfig{ConnString: cfg.ConnString, Slot: cfg.Slot, StatusInterval: cfg.StatusInterval,
		OnStart: cfg.OnStart, Logger: cfg.Logger}
	if cfg.Handler != nil {
		wc.Handler = func(ctx context.Context, es []store.Event) error { return cfg.Handler(ctx, eventsOf(es)) }
	}
	if cfg.Session != nil {
		guard := session.Config(*cfg.Session)
		wc.Session = &guard
	}
	return outbox.StreamWAL(ctx, wc)
}

// DropWALSlot drops a WAL consumer's replication slot.
func DropWALSlot(ctx context.Context, connString, slot string) error {
	return outbox.DropSlot(ctx, connString, slot)
}
