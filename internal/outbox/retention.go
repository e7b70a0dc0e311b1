package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/internal/store"
)

// Retention defaults.
const (
	DefaultRetention       = 7 * 24 * time.Hour
	DefaultRetentionBatch  = 1000
	DefaultIdleConsumerAge = 24 * time.Hour
	maxRetentionBatches    = 100
)

// Retained is what a retention pass deleted.
type Retained struct {
	Completion, Lease int
}

// retainSQL deletes, in one bounded batch, events older than the window
// that every registered consumer of their stream has passed. Completion
// events must also have been dispatched.
const retainSQL = `
DELETE FROM %[1]s WHERE (partition_key, event_id) IN (
	SELECT e.partition_key, e.event_id FROM %[1]s e
	WHERE e.occurred_at < now() - $1::bigint * interval '1 microsecond' %[2]s
		AND NOT EXISTS (SELECT 1 FROM ff_outbox_consumer c
			WHERE c.stream IN ('%[3]s', 'all') AND (e.txid, e.event_id) > (c.cursor_txid, c.cursor_event_id))
	ORDER BY e.event_id
	LIMIT $2)`

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
		table, extra, stream string
		n                    *int
	}{
		{"ff_completion_event", "AND e.dispatched_at IS NOT NULL", "completion", &r.Completion},
		{"ff_lease_event", "", "lease", &r.Lease},
	} {
		q := fmt.Sprintf(retainSQL, t.table, t.extra, t.stream)
		for range maxRetentionBatches {
			tag, err := db.Exec(ctx, q, window.Microseconds(), batch)
			if err != nil {
				return r, fmt.Errorf("retention of %s: %w", t.table, err)
			}
			*t.n += int(tag.RowsAffected())
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return r, nil
}

// IdleConsumer is a consumer holding retention back.
type IdleConsumer struct {
	Name   string
	Stream store.Stream
	Idle   time.Duration
}

// IdleConsumers lists consumers that have not read for longer than limit
// while events wait for them: they hold retention back, and are reported,
// never dropped.
func IdleConsumers(ctx context.Context, db store.DB, limit time.Duration) ([]IdleConsumer, error) {
	rows, err := db.Query(ctx, `
		SELECT c.name, c.stream, extract(epoch FROM now() - c.last_read_at)
		FROM ff_outbox_consumer c
		WHERE c.last_read_at < now() - $1::bigint * interval '1 microsecond'
			AND ((c.stream IN ('completion', 'all') AND EXISTS (SELECT 1 FROM ff_completion_event e
					WHERE (e.txid, e.event_id) > (c.cursor_txid, c.cursor_event_id)))
				OR (c.stream IN ('lease', 'all') AND EXISTS (SELECT 1 FROM ff_lease_event e
					WHERE (e.txid, e.event_id) > (c.cursor_txid, c.cursor_event_id))))
		ORDER BY c.name`, limit.Microseconds())
	if err != nil {
		return nil, fmt.Errorf("read idle consumers: %w", err)
	}
	defer rows.Close()
	var out []IdleConsumer
	for rows.Next() {
		var c IdleConsumer
		var stream string
		var secs float64
		if err := rows.Scan(&c.Name, &stream, &secs); err != nil {
			return nil, err
		}
		c.Stream, c.Idle = store.Stream(stream), time.Duration(secs*float64(time.Second))
		out = append(out, c)
	}
	return out, rows.Err()
}
