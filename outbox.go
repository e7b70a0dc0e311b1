package ffd

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/store"
)

// Outbox types; see docs/consumers.md.
type (
	// OutboxEvent is one row of ff_completion_event or ff_lease_event.
	OutboxEvent = outbox.Event
	// OutboxStream is completion, lease or all.
	OutboxStream = store.Stream
	// OutboxCursor is a position in (txid, event_id) order.
	OutboxCursor = outbox.Cursor
	// OutboxStart is where a new consumer begins.
	OutboxStart = outbox.Start
	// OutboxConsumer is a named consumer and its cursor.
	OutboxConsumer = outbox.Consumer
	// OutboxHandler processes a batch in the transaction that acknowledges
	// it.
	OutboxHandler = outbox.Handler
	// WALConfig configures StreamWAL.
	WALConfig = outbox.WALConfig
	// WALHandler receives the events of one committed transaction.
	WALHandler = outbox.WALHandler
)

// Outbox constants.
const (
	StreamCompletion = store.StreamCompletion
	StreamLease      = store.StreamLease
	StreamAll        = store.StreamAll
	FromStart        = outbox.FromStart
	FromNow          = outbox.FromNow
)

// ErrWALLevel is matched when the server is not running wal_level=logical.
var ErrWALLevel = outbox.ErrWALLevel

// ReadEvents returns up to limit committed events after the cursor, in
// (txid, event_id) order, never skipping one that commits later.
func (c *Client) ReadEvents(ctx context.Context, s OutboxStream, after OutboxCursor, limit int) ([]OutboxEvent, error) {
	return outbox.Read(ctx, c.pool, s, after, limit)
}

// RegisterConsumer creates a named consumer (or returns the existing one,
// cursor kept).
func (c *Client) RegisterConsumer(ctx context.Context, name string, s OutboxStream, start OutboxStart) (*OutboxConsumer, error) {
	return outbox.Register(ctx, c.pool, name, s, start)
}

// DropConsumer removes a named consumer; retention stops waiting for it.
func (c *Client) DropConsumer(ctx context.Context, name string) error {
	return outbox.Drop(ctx, c.pool, name)
}

// AckTx moves a consumer's cursor to cur inside tx, together with the
// consumer's own writes.
func (c *Client) AckTx(ctx context.Context, tx pgx.Tx, name string, cur OutboxCursor) error {
	return outbox.Ack(ctx, tx, name, cur)
}

// ConsumeParams configures Consume; zero values take the defaults of
// internal/outbox (stream all, from start, batch 100, poll 1 s).
type ConsumeParams struct {
	Name         string
	Stream       OutboxStream
	Start        OutboxStart
	Batch        int
	PollInterval time.Duration
	Handler      OutboxHandler
}

// Consume follows the outbox for a named consumer until ctx ends: each
// batch is handed to the handler inside the transaction that advances the
// cursor, so a handler writing to this database processes each event
// exactly once. It wakes on NOTIFY and polls as a fallback.
func (c *Client) Consume(ctx context.Context, p ConsumeParams) error {
	return outbox.Consume(ctx, outbox.ConsumeConfig{Pool: c.pool, Name: p.Name, Stream: p.Stream, Start: p.Start,
		Batch: p.Batch, PollInterval: p.PollInterval, Handler: p.Handler, Logger: c.cfg.Logger})
}

// StreamWAL follows both outboxes in commit order through a logical
// replication slot, resuming from its confirmed position (at-least-once).
func StreamWAL(ctx context.Context, cfg WALConfig) error { return outbox.StreamWAL(ctx, cfg) }

// DropWALSlot drops a WAL consumer's replication slot.
func DropWALSlot(ctx context.Context, connString, slot string) error {
	return outbox.DropSlot(ctx, connString, slot)
}
