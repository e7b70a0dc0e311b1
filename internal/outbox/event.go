package outbox

import (
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// ParseStream validates a stream name.
func ParseStream(s string) (store.Stream, error) {
	switch store.Stream(s) {
	case store.StreamCompletion, store.StreamLease, store.StreamAll:
		return store.Stream(s), nil
	}
	return "", fault.Invalid(fault.KindInvalidValue, "stream", s, "want completion, lease or all")
}

// Event is one outbox row, of either table. JSON names are the schema's
// and are stable (docs/consumers.md).
type Event struct {
	Stream       store.Stream `json:"stream"`
	EventID      int64        `json:"event_id"`
	TxID         uint64       `json:"txid"`
	PartitionKey int16        `json:"partition_key"`
	ExecutionID  string       `json:"execution_id,omitempty"` // {fp:N}:<uuid>; empty for a flow's own event
	FlowID       string       `json:"flow_id,omitempty"`
	OccurredAt   time.Time    `json:"occurred_at"`
	Attempt      int          `json:"attempt"`
	// Completion events.
	Outcome      string     `json:"outcome,omitempty"`
	Namespace    string     `json:"namespace,omitempty"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	// Lease events.
	EventType      string     `json:"event_type,omitempty"`
	LeaseEpoch     int64      `json:"lease_epoch,omitempty"`
	Worker         string     `json:"worker,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
}

// Cursor is a position in the (txid, event_id) order: everything at or
// before it has been consumed.
type Cursor struct {
	TxID    uint64 `json:"txid"`
	EventID int64  `json:"event_id"`
}

// Less orders cursors.
func (c Cursor) Less(o Cursor) bool {
	return c.TxID < o.TxID || (c.TxID == o.TxID && c.EventID < o.EventID)
}

// Position is the cursor just at e.
func (e Event) Position() Cursor { return Cursor{TxID: e.TxID, EventID: e.EventID} }

func execIDString(part int16, u *uuid.UUID) string {
	if u == nil {
		return ""
	}
	return ident.ExecutionID{Partition: part, UUID: *u}.String()
}

func parseTxID(s string) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("txid %q: %w", s, err)
	}
	return v, nil
}
