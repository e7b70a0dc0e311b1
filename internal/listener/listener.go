// Package listener is the design card's listener: the LISTEN connection
// that the daemon, workers and outbox consumers share, and the daemon's
// fan-out of what it hears to the cascade, sibling-cancel and timeout
// workers (Fanout).
//
// A Listener LISTENs on typed topics on a connection of its own (its DSN
// may differ from a pool's, so that pooled work can go through a
// transaction pooler while LISTEN goes direct), pings the connection when
// idle, and reconnects with jittered exponential backoff when it drops.
// Notifications sent while it was away are gone, so after every connect,
// first or not, it calls OnConnect, where its owner sweeps (the daemon),
// re-checks its leases and claims (a worker) or reads (a consumer).
// Notifications go to Handle, which must not block.
//
// It follows the lifecycle of every ffd component: Start(ctx) returns once
// the loop runs, Stop(ctx) ends it and returns once it has ended (or when
// ctx does).
package listener

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
)

// Topic is a notification channel.
type Topic string

// Topics.
const (
	// Completion carries the partitions of completion events to dispatch
	// (store.ParsePartitions reads them).
	Completion Topic = store.ChannelCompletion
	// Lease carries the partitions of lease events written, or
	// "due:<unix ms>" when requeued executions come due (store.DuePrefix).
	Lease Topic = store.ChannelLease
	// Ready carries the lanes that have claimable work.
	Ready Topic = store.ChannelReady
	// Revoke carries "partition:uuid:epoch" of a lease taken away.
	Revoke Topic = store.ChannelRevoke
	// Event says an event was published.
	Event Topic = store.ChannelEvent
)

// Notification is one notification on a topic.
type Notification struct {
	Topic   Topic
	Payload string
}

// DefaultApplicationName is a listener connection's application_name
// unless its owner names it, so that operators (and fault tests) can find
// it in pg_stat_activity.
const DefaultApplicationName = "ffd-listener"

// Defaults.
const (
	DefaultPingInterval = 10 * time.Second
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 10 * time.Second
)

// Config configures a Listener.
type Config struct {
	// ConnConfig is the connection to LISTEN on. Required.
	ConnConfig *pgx.ConnConfig
	// Topics to LISTEN on; at least one. Required.
	Topics []Topic
	// Handle receives each notification; it must not block. Required.
	Handle func(Notification)
	// OnConnect runs after every successful (re)connect and LISTEN, before
	// notifications are read. Default: nothing.
	OnConnect func(ctx context.Context, reconnect bool)
	// OnDisconnect runs when the connection is lost. Default: nothing.
	OnDisconnect func(err error)
	// PingInterval: ping the connection after this long without traffic.
	// Default DefaultPingInterval.
	PingInterval time.Duration
	// MinBackoff and MaxBackoff bound the reconnect backoff. Defaults
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// ApplicationName is the connection's application_name. Default
	// DefaultApplicationName.
	ApplicationName string
	// Logger: default none.
	Logger *zap.Logger
}

// Listener is the LISTEN loop.
type Listener struct {
	cfg        Config
	connected  atomic.Bool
	reconnects atomic.Int64

	mu   sync.Mutex
	stop context.CancelFunc
	done chan struct{}
}

// New validates cfg and builds a listener; Start runs it.
func New(cfg Config) (*Listener, error) {
	switch {
	case cfg.ConnConfig == nil:
		return nil, errors.New("listener: ConnConfig is required")
	case cfg.Handle == nil:
		return nil, errors.New("listener: Handle is required")
	case len(cfg.Topics) == 0:
		return nil, errors.New("listener: at least one topic is required")
	}
	if cfg.PingInterval <= 0 {
		cfg.PingInterval = DefaultPingInterval
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(DefaultMaxBackoff, cfg.MinBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.ApplicationName == "" {
		cfg.ApplicationName = DefaultApplicationName
	}
	cc := cfg.ConnConfig.Copy()
	cc.RuntimeParams["application_name"] = cfg.ApplicationName
	// A copy of a pool's configuration keeps its statements' cancel
	// requests; this connection's waits end by their context instead.
	session.CloseOnCancel(&cc.Config)
	cfg.ConnConfig = cc
	return &Listener{cfg: cfg}, nil
}

// Connected reports whether LISTEN is up now.
func (n *Listener) Connected() bool { return n.connected.Load() }

// Reconnects counts connects after the first.
func (n *Listener) Reconnects() int64 { return n.reconnects.Load() }

// Start runs the loop in the background until Stop or until ctx ends. A
// second Start while running is a no-op. It returns at once; the first
// connect is reported to OnConnect.
func (n *Listener) Start(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.done != nil {
		return nil
	}
	ctx, n.stop = context.WithCancel(ctx)
	n.done = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		n.run(ctx)
	}(n.done)
	return nil
}

// Stop ends the loop and returns once it has ended and its connection is
// closed, or ctx's error when ctx ends first (the loop still ends, at
// once: only a connection closing in the background can outlast Stop).
// Stopping a listener that is not running is a no-op.
func (n *Listener) Stop(ctx context.Context) error {
	n.mu.Lock()
	stop, done := n.stop, n.done
	n.stop, n.done = nil, nil
	n.mu.Unlock()
	if done == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Listener) run(ctx context.Context) {
	backoff := n.cfg.MinBackoff
	first := true
	for ctx.Err() == nil {
		listened, err := n.session(ctx, !first)
		if ctx.Err() != nil {
			return
		}
		if listened {
			first = false
			backoff = n.cfg.MinBackoff // a session that got going resets the backoff
		}
		if n.cfg.OnDisconnect != nil {
			n.cfg.OnDisconnect(err)
		}
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		n.cfg.Logger.Warn("listener disconnected; reconnecting", zap.Error(err), zap.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, n.cfg.MaxBackoff)
	}
}

// session connects, LISTENs, runs OnConnect and reads notifications until
// the connection fails or ctx ends.
func (n *Listener) session(ctx context.Context, reconnect bool) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, n.cfg.ConnConfig)
	if err != nil {
		return false, err
	}
	defer func() {
		n.connected.Store(false)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Close(closeCtx)
		cancel()
	}()
	topics := make([]string, len(n.cfg.Topics))
	for i, t := range n.cfg.Topics {
		topics[i] = string(t)
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{string(t)}.Sanitize()); err != nil {
			return false, err
		}
	}
	n.connected.Store(true)
	if reconnect {
		n.reconnects.Add(1)
	}
	if reconnect {
		n.cfg.Logger.Info("listening again", zap.Strings("topics", topics))
	} else {
		n.cfg.Logger.Debug("listening", zap.Strings("topics", topics))
	}
	if n.cfg.OnConnect != nil {
		n.cfg.OnConnect(ctx, reconnect)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, n.cfg.PingInterval)
		msg, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			n.cfg.Handle(Notification{Topic: Topic(msg.Channel), Payload: msg.Payload})
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Idle: make sure the connection is still there.
			pctx, cancel := context.WithTimeout(ctx, n.cfg.PingInterval)
			err := conn.Ping(pctx)
			cancel()
			if err != nil {
				return true, err
			}
		default:
			return true, err
		}
	}
}
