package ffdtype

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
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

// OutboxStreams lists every stream.
var OutboxStreams = []OutboxStream{StreamCompletion, StreamLease, StreamAll}

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

// OutboxCursor is a position in (txid, event_id) order: everything at or
// before it has been consumed.
type OutboxCursor struct {
	TxID    uint64 `json:"txid"`
	EventID int64  `json:"event_id"`
}

// Less orders cursors.
func (c OutboxCursor) Less(o OutboxCursor) bool {
	return c.TxID < o.TxID || (c.TxID == o.TxID && c.EventID < o.EventID)
}

// OutboxStart is where a new consumer begins.
type OutboxStart int

// Starts.
const (
	// FromStart reads every retained event.
	FromStart OutboxStart = iota
	// FromNow reads only events of transactions that start after the
	// consumer is registered.
	FromNow
)

// OutboxConsumer is a named consumer and its cursor.
type OutboxConsumer struct {
	Name   string
	Stream OutboxStream
	Cursor OutboxCursor
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
	// Handler is called once per committed transaction (on Citus, once
	// per worker node the transaction wrote on), never twice at once.
	// Required.
	Handler WALHandler
	// StatusInterval: standby status updates when idle. Default 10 s.
	StatusInterval time.Duration
	// OnStart, when set, is called once streaming has started (on Citus,
	// on every node): every transaction committed from then on will be
	// delivered. (A new slot
	// holds only what commits after it was created; read older events with
	// the cursor protocol.)
	OnStart func()
	// Session is the connection's guard (keepalives above all: an idle
	// stream must still notice a vanished server). Default
	// ffd.DefaultSessionConfig().
	Session *SessionConfig
	// Nodes, on Citus, are the connection strings of the worker nodes to
	// stream from, one slot of the same name on each, for nodes that this
	// process reaches at other addresses than the cluster's own names.
	// Default: the nodes the coordinator's pg_dist_node lists (every
	// active primary that holds, or may hold, a shard of the outbox),
	// reached with ConnString's settings; on one Postgres, ConnString
	// itself. Ignored on one Postgres.
	Nodes []string
	// Logger: default none.
	Logger *zap.Logger
}
