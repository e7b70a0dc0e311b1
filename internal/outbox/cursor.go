package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxBatch bounds one read.
const MaxBatch = 10000

// Read returns up to limit committed events after cursor, in (txid,
// event_id) order: the protocol of docs/design.md section 7.
func Read(ctx context.Context, db store.DB, s ffdtype.OutboxStream, after ffdtype.OutboxCursor, limit int) ([]ffdtype.OutboxEvent, error) {
	if _, err := ParseStream(string(s)); err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxBatch {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "limit", strconv.Itoa(limit), fmt.Sprintf("want 1..%d", MaxBatch))
	}
	return store.ReadEvents(ctx, db, s, after, limit)
}

// Register creates a named consumer at start, or returns the existing one
// (whose cursor is kept: a restart resumes right after it). Registering an
// existing name for another stream is a conflict.
func Register(ctx context.Context, db store.DB, name string, s ffdtype.OutboxStream, start ffdtype.OutboxStart) (*ffdtype.OutboxConsumer, error) {
	if err := leases.ValidateName("consumer", name); err != nil {
		return nil, err
	}
	if _, err := ParseStream(string(s)); err != nil {
		return nil, err
	}
	c := ffdtype.OutboxCursor{}
	if start == ffdtype.FromNow {
		var err error
		if c, err = store.Horizon(ctx, db); err != nil {
			return nil, err
		}
	}
	if err := store.InsertConsumer(ctx, db, name, s, c); err != nil {
		return nil, err
	}
	got, err := Get(ctx, db, name)
	if err != nil {
		return nil, err
	}
	if got.Stream != s {
		return nil, &ffdtype.ConflictError{Object: "consumer", ID: name, Reason: "registered for stream " + string(got.Stream), Existing: got}
	}
	return got, nil
}

// Get reads a named consumer.
func Get(ctx context.Context, db store.DB, name string) (*ffdtype.OutboxConsumer, error) {
	c, err := store.GetConsumer(ctx, db, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "consumer", ID: name}
	}
	return c, err
}

// Ack moves a consumer's cursor forward to c, in db (pass the transaction
// that did the consumer's work for exactly-once processing). A cursor
// never moves back.
func Ack(ctx context.Context, db store.DB, name string, c ffdtype.OutboxCursor) error {
	moved, err := store.AdvanceConsumer(ctx, db, name, c)
	if err != nil {
		return err
	}
	if !moved {
		if _, err := Get(ctx, db, name); err != nil {
			return err
		}
		return &ffdtype.ConflictError{Object: "consumer", ID: name, Reason: "its cursor is already past " + fmt.Sprint(c)}
	}
	return nil
}

// Drop removes a named consumer: retention stops waiting for it.
func Drop(ctx context.Context, db store.DB, name string) error {
	found, err := store.DeleteConsumer(ctx, db, name)
	if err != nil {
		return err
	}
	if !found {
		return &ffdtype.NotFoundError{Object: "consumer", ID: name}
	}
	return nil
}
