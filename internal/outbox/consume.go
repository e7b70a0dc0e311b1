package outbox

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/listener"
	"github.com/flowfabric/ffd/internal/store"
)

// Consumer defaults.
const (
	DefaultBatch        = 100
	DefaultPollInterval = time.Second
)

// Handler processes a batch inside tx, the transaction that will also
// advance the consumer's cursor past the batch. Returning an error rolls
// both back: the batch is delivered again.
type Handler func(ctx context.Context, tx pgx.Tx, events []Event) error

// ConsumeConfig configures Consume.
type ConsumeConfig struct {
	// Pool to read and ack on. Required.
	Pool *pgxpool.Pool
	// Name of the consumer (registered on first use). Required.
	Name string
	// Stream: completion, lease or all. Default all.
	Stream store.Stream
	// Start is where a new consumer begins. Default FromStart.
	Start Start
	// Batch bounds the events per handler call. Default DefaultBatch.
	Batch int
	// PollInterval is the fallback when no notification arrives (jittered
	// ±10%). Default DefaultPollInterval.
	PollInterval time.Duration
	// Handler is called for each non-empty batch. Required.
	Handler Handler
	// Listen wakes the consumer on NOTIFY; default true (set NoListen to
	// poll only).
	NoListen bool
	Logger   *zap.Logger
}

// Consume follows the stream for the named consumer until ctx ends
// (returning nil), the handler fails (returning its error, a
// *HandlerError, with nothing acknowledged for that batch), or a
// permanent error occurs (bad credentials, a dropped consumer: see
// Transient). Transient errors — a terminated backend, a server crash
// restart, a network blip — are logged and retried with backoff from the
// acknowledged cursor, so no event is skipped; a batch whose commit's
// answer was lost may be delivered again (dedupe by event id).
func Consume(ctx context.Context, cfg ConsumeConfig) error {
	if cfg.Pool == nil || cfg.Handler == nil {
		return errors.New("outbox: Consume needs a pool and a handler")
	}
	if cfg.Stream == "" {
		cfg.Stream = store.StreamAll
	}
	if err := bound.ConsumerBatch.Fill("Batch", &cfg.Batch, DefaultBatch); err != nil {
		return err
	}
	if err := bound.PollInterval.Fill("PollInterval", &cfg.PollInterval, DefaultPollInterval); err != nil {
		return err
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if err := RetryTransient(ctx, cfg.Logger.With(zap.String("consumer", cfg.Name)), "register consumer: database unavailable; retrying", func() error {
		_, err := Register(ctx, cfg.Pool, cfg.Name, cfg.Stream, cfg.Start)
		return err
	}); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if !cfg.NoListen {
		l, err := listener.New(listener.Config{
			ConnConfig: cfg.Pool.Config().ConnConfig,
			Channels:   channelsOf(cfg.Stream),
			Handle:     func(*pgconn.Notification) { signal() },
			OnConnect:  func(context.Context, bool) { signal() },
			Logger:     cfg.Logger.Named("listener"),
		})
		if err != nil {
			return err
		}
		lctx, stop := context.WithCancel(ctx)
		listening := make(chan struct{})
		go func() {
			defer close(listening)
			l.Run(lctx)
		}()
		defer func() { stop(); <-listening }()
	}
	retry := NewBackoff()
	for {
		n, err := ConsumeOnce(ctx, cfg.Pool, cfg.Name, cfg.Batch, cfg.Handler)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if !Transient(err) {
				return err
			}
			cfg.Logger.Warn("consumer: database unavailable; resuming from the cursor", zap.String("consumer", cfg.Name), zap.Error(err), zap.Duration("retry_in", retry.Next()))
			if !retry.Wait(ctx) {
				return nil
			}
			continue
		}
		retry.Reset()
		if n == cfg.Batch {
			continue // more is probably waiting
		}
		t := time.NewTimer(time.Duration(float64(cfg.PollInterval) * (0.9 + 0.2*rand.Float64())))
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

func channelsOf(s store.Stream) []string {
	switch s {
	case store.StreamCompletion:
		return []string{store.ChannelCompletion}
	case store.StreamLease:
		return []string{store.ChannelLease}
	}
	return []string{store.ChannelCompletion, store.ChannelLease}
}

// ConsumeOnce reads one batch after the consumer's cursor and hands it to
// h in one transaction that also advances the cursor; it returns how many
// events it delivered. The consumer's row is locked for the transaction,
// so two processes running the same consumer take turns instead of
// delivering a batch twice.
func ConsumeOnce(ctx context.Context, db store.DB, name string, batch int, h Handler) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		cons, err := store.LockConsumer(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return &fault.NotFoundError{Object: "consumer", ID: name}
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
