package outbox

import (
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// ParseStream validates a stream name.
func ParseStream(s string) (store.Stream, error) {
	switch store.Stream(s) {
	case store.StreamCompletion, store.StreamLease, store.StreamAll:
		return store.Stream(s), nil
	}
	return "", fault.Invalid(ffdtype.KindInvalidValue, "stream", s, "want completion, lease or all")
}

// Event is one outbox row, of either table (store.Event).
type Event = store.Event

// Cursor is a position in the (txid, event_id) order (store.Cursor).
type Cursor = store.Cursor
