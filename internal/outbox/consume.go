package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/store"
)

// Consumer defaults.
const (
	DefaultBatch        = bound.DefaultConsumerBatch
	DefaultPollInterval = bound.DefaultConsumerPollInterval
)

// ConsumeConfig configures Consume.
type ConsumeConfig struct {
	// Pool to read and ack on. Required.
	Pool *pgxpool.Pool
	// Name of a durable consumer, registered on first use: its cursor is
	// stored and acknowledged with each batch. Default "": an ephemeral
	// cursor, kept in memory from Start.
	Name string
	// Stream: completion, lease or all. Default all.
	Stream ffdtype.OutboxStream
	// Start is where a new cursor begins. Default FromStart.
	Start ffdtype.OutboxStart
	// Batch bounds the events per handler call. Default DefaultBatch.
	Batch int
	// Limit stops Consume once it has delivered this many events. Default
	// 0: no limit.
	Limit int
	// Once stops Consume when it has caught up, and returns transient
	// errors instead of waiting them out: a one-shot read. Default false:
	// follow until ctx ends.
	Once bool
	// PollInterval is the fallback when no notification arrives (jittered
	// ±10%). Default DefaultPollInterval.
	PollInterval time.Duration
	// Handler is called for each non-empty batch. Required.
	Handler ffdtype.OutboxHandler
	// NoListen polls only. Default false: a listener wakes the consumer.
	NoListen bool
	// Logger: default none.
	Logger *zap.Logger
}

// Consume follows the stream until ctx ends (returning nil), Limit events
// were delivered, or (Once) it has caught up; the handler fails (returning
// its error, a *HandlerError, with nothing acknowledged for that batch);
// or a permanent error occurs (bad credentials, a dropped consumer: see
// Transient). Transient errors — a terminated backend, a server crash
// restart, a network blip — are logged and retried with backoff from the
// acknowledged cursor, so no event is skipped; a batch whose commit's
// answer was lost may be delivered again (dedupe by event id).
func Consume(ctx context.Context, cfg ConsumeConfig) error {
	if err := cfg.normalize(); err != nil {
		return err
	}
	log := cfg.Logger.With(zap.String("consumer", cfg.Name))
	c := &consumer{cfg: cfg}
	place := func() error { return c.place(ctx) }
	var err error
	if cfg.Once {
		err = place()
	} else {
		err = RetryTransient(ctx, log, "place consumer: database unavailable; retrying", place)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if !cfg.NoListen && !cfg.Once {
		n, err := listener.New(listener.Config{
			ConnConfig: cfg.Pool.Config().ConnConfig,
			Topics:     TopicsOf(cfg.Stream),
			Handle:     func(listener.Notification) { signal() },
			OnConnect:  func(context.Context, bool) { signal() },
			Logger:     cfg.Logger.Named("listener"),
		})
		if err != nil {
			return err
		}
		if err := n.Start(ctx); err != nil {
			return err
		}
		defer func() { _ = n.Stop(context.WithoutCancel(ctx)) }()
	}
	return c.loop(ctx, log, wake)
}

func (cfg *ConsumeConfig) normalize() error {
	if cfg.Pool == nil || cfg.Handler == nil {
		return errors.New("outbox: Consume needs a pool and a handler")
	}
	if cfg.Stream == "" {
		cfg.Stream = ffdtype.StreamAll
	}
	if err := bound.ConsumerBatch.Fill("Batch", &cfg.Batch); err != nil {
		return err
	}
	if err := bound.ConsumerPollInterval.Fill("PollInterval", &cfg.PollInterval); err != nil {
		return err
	}
	if cfg.Limit < 0 {
		return fault.Invalid(ffdtype.KindOutOfRange, "limit", strconv.Itoa(cfg.Limit), "want 0 (no limit) or more")
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return nil
}

// consumer is one Consume's state: its ephemeral cursor (a durable one
// lives in the database) and how much it delivered.
type consumer struct {
	cfg       ConsumeConfig
	cursor    ffdtype.OutboxCursor
	delivered int
}

// place registers a durable consumer, or sets an ephemeral cursor at
// Start.
func (c *consumer) place(ctx context.Context) (err error) {
	switch {
	case c.cfg.Name != "":
		_, err = Register(ctx, c.cfg.Pool, c.cfg.Name, c.cfg.Stream, c.cfg.Start)
	case c.cfg.Start == ffdtype.FromNow:
		c.cursor, err = store.Horizon(ctx, c.cfg.Pool)
	}
	return err
}

// loop delivers batches until the consumer is done, waiting for a wake-up
// or the poll interval whenever it has caught up.
func (c *consumer) loop(ctx context.Context, log *zap.Logger, wake <-chan struct{}) error {
	retry := NewBackoff()
	for {
		batch := c.cfg.Batch
		if c.cfg.Limit > 0 {
			batch = min(batch, c.cfg.Limit-c.delivered)
		}
		n, err := c.step(ctx, batch)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if c.cfg.Once || !Transient(err) {
				return err
			}
			log.Warn("consumer: database unavailable; resuming from the cursor", zap.Error(err), zap.Duration("retry_in", retry.Next()))
			if !retry.Wait(ctx) {
				return nil
			}
			continue
		}
		retry.Reset()
		c.delivered += n
		switch {
		case c.cfg.Limit > 0 && c.delivered >= c.cfg.Limit:
			return nil
		case n == batch:
			continue // more is probably waiting
		case c.cfg.Once:
			return nil
		}
		t := time.NewTimer(time.Duration(float64(c.cfg.PollInterval) * (0.9 + 0.2*rand.Float64())))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// step delivers one batch: through the durable consumer's row, or after
// the ephemeral cursor, which moves once the handler's transaction commits.
func (c *consumer) step(ctx context.Context, batch int) (int, error) {
	if c.cfg.Name != "" {
		return ConsumeOnce(ctx, c.cfg.Pool, c.cfg.Name, batch, c.cfg.Handler)
	}
	var events []ffdtype.OutboxEvent
	err := store.InTxOnce(ctx, c.cfg.Pool, func(tx pgx.Tx) error {
		var err error
		if events, err = Read(ctx, tx, c.cfg.Stream, c.cursor, batch); err != nil || len(events) == 0 {
			return err
		}
		if err := c.cfg.Handler(ctx, tx, events); err != nil {
			return &HandlerError{Consumer: "(ephemeral)", Err: err}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if len(events) > 0 {
		c.cursor = events[len(events)-1].Position()
	}
	return len(events), nil
}

// TopicsOf is the listener topics that announce events of a stream.
func TopicsOf(s ffdtype.OutboxStream) []listener.Topic {
	switch s {
	case ffdtype.StreamCompletion:
		return []listener.Topic{listener.Completion}
	case ffdtype.StreamLease:
		return []listener.Topic{listener.Lease}
	}
	return []listener.Topic{listener.Completion, listener.Lease}
}

// ConsumeOnce reads one batch after the consumer's cursor and hands it to
// h in one transaction that also advances the cursor; it returns how many
// events it delivered. The consumer's row is locked for the transaction,
// so two processes running the same consumer take turns instead of
// delivering a batch twice.
func ConsumeOnce(ctx context.Context, db store.DB, name string, batch int, h ffdtype.OutboxHandler) (int, error) {
	var n int
	err := store.InTxOnce(ctx, db, func(tx pgx.Tx) error {
		cons, err := store.LockConsumer(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return &ffdtype.NotFoundError{Object: "consumer", ID: name}
		}
		if err != nil {
			return err
		}
		events, err := Read(ctx, tx, cons.Stream, cons.Cursor, batch)
		if err != nil {
			return err
		}
		if len(events) == 0 {
			return store.TouchConsumer(ctx, tx, name)
		}
		if err := h(ctx, tx, events); err != nil {
			return &HandlerError{Consumer: name, Err: err}
		}
		n = len(events)
		return Ack(ctx, tx, name, events[len(events)-1].Position())
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// Backoff is a jittered exponential delay for reconnect loops: 100 ms
// doubling to 5 s. Call Next (to log it), then Wait; Reset after a success.
type Backoff struct{ d, pending time.Duration }

// NewBackoff starts at 100 ms.
func NewBackoff() *Backoff { return &Backoff{d: 100 * time.Millisecond} }

// Next is the delay the coming Wait will take.
func (b *Backoff) Next() time.Duration {
	b.pending = time.Duration(float64(b.d) * (0.8 + 0.4*rand.Float64()))
	return b.pending
}

// Wait sleeps for the delay Next chose; false when ctx ended first.
func (b *Backoff) Wait(ctx context.Context) bool {
	if b.pending == 0 {
		b.Next()
	}
	t := time.NewTimer(b.pending)
	defer t.Stop()
	b.pending, b.d = 0, min(b.d*2, 5*time.Second)
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Reset starts over at 100 ms.
func (b *Backoff) Reset() { b.d = 100 * time.Millisecond }
