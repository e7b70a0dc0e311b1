package ffd

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/outbox"
)

// ErrWALLevel is matched when the server is not running wal_level=logical.
var ErrWALLevel = outbox.ErrWALLevel

// ErrWALNodesChanged is matched when StreamWAL, on Citus, stopped because
// the worker nodes holding the outbox changed (a node added or removed):
// call it again to stream from the new set, each node from its own slot.
var ErrWALNodesChanged = outbox.ErrNodesChanged

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
	return outbox.Consume(ctx, outbox.ConsumeConfig{Pool: c.pool, Name: p.Name, Stream: p.Stream, Start: p.Start,
		Batch: p.Batch, PollInterval: p.PollInterval, Handler: p.Handler, Logger: c.cfg.Logger})
}

// StreamWAL follows both outboxes in commit order through a logical
// replication slot, resuming from its confirmed position (at-least-once).
func StreamWAL(ctx context.Context, cfg WALConfig) error {
	return outbox.StreamWAL(ctx, cfg)
}

// DropWALSlot drops a WAL consumer's replication slot.
func DropWALSlot(ctx context.Context, connString, slot string) error {
	return outbox.DropSlot(ctx, connString, slot)
}
