package outbox

import (
	"context"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/store"
)

// Retention defaults.
const (
	DefaultRetention       = bound.DefaultOutboxRetention
	DefaultRetentionBatch  = 1000
	DefaultIdleConsumerAge = bound.DefaultConsumerIdleLimit
	maxRetentionBatches    = 100
)

// Retained is what a retention pass deleted.
type Retained struct {
	Completion, Lease int
}

// Retain deletes retained events past the window in bounded batches: only
// dispatched completion events, and only events every registered consumer
// has passed. A window of 0 or less deletes nothing.
func Retain(ctx context.Context, db store.DB, window time.Duration, batch int) (Retained, error) {
	var r Retained
	if window <= 0 {
		return r, nil
	}
	if batch <= 0 {
		batch = DefaultRetentionBatch
	}
	for _, t := range []struct {
		stream ffdtype.OutboxStream
		n      *int
	}{
		{ffdtype.StreamCompletion, &r.Completion},
		{ffdtype.StreamLease, &r.Lease},
	} {
		for range maxRetentionBatches {
			n, err := store.DeleteRetained(ctx, db, t.stream, window, batch)
			if err != nil {
				return r, err
			}
			*t.n += n
			if n < batch {
				break
			}
		}
	}
	return r, nil
}
