// Package listener owns the daemon's dedicated LISTEN connection.
//
// It LISTENs on the completion, lease and ready channels on a connection of
// its own (its DSN may differ from the pool's, so that pooled work can go
// through a transaction pooler while LISTEN goes direct), pings it when
// idle, and reconnects with exponential backoff and jitter when it drops.
// Notifications sent while it was away are gone, so after every connect,
// first or not, it calls OnConnect, which the daemon uses to sweep at once.
// Notifications are handed to Handle, which must not block: the daemon's
// fan-out drops a hint when a queue is full and counts it, and the sweep
// catches up.
package listener

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// Channels the daemon listens on.
var Channels = []string{store.ChannelCompletion, store.ChannelLease, store.ChannelReady}

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
	// Channels to LISTEN on. Default Channels.
	Channels []string
	// Handle receives each notification; it must not block.
	Handle func(n *pgconn.Notification)
	// OnConnect runs after every successful (re)connect and LISTEN, before
	// notifications are read; the daemon sweeps there.
	OnConnect func(ctx context.Context, reconnect bool)
	// OnDisconnect runs when the connection is lost.
	OnDisconnect func(err error)
	// PingInterval: ping the connection after this long without traffic.
	// Default DefaultPingInterval.
	PingInterval time.Duration
	// MinBackoff and MaxBackoff bound the reconnect backoff. Defaults
	// DefaultMinBackoff, DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	Logger                 *zap.Logger
}

// Listener is the LISTEN loop.
type Listener struct {
	cfg        Config
	connected  atomic.Bool
	reconnects atomic.Int64
	pid        atomic.Int32
}

// New builds a listener.
func New(cfg Config) (*Listener, error) {
	if cfg.ConnConfig == nil {
		return nil, errors.New("listener: ConnConfig is required")
	}
	if cfg.Handle == nil {
		return nil, errors.New("listener: Handle is required")
	}
	if len(cfg.Channels) == 0 {
		cfg.Channels = Channels
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
	return &Listener{cfg: cfg}, nil
}

// Connected reports whether LISTEN is up now.
func (l *Listener) Connected() bool { return l.connected.Load() }

// Reconnects counts connects after the first.
func (l *Listener) Reconnects() int64 { return l.reconnects.Load() }

// BackendPID is the server process of the current connection (0 when
// disconnected); tests terminate it to prove recovery.
func (l *Listener) BackendPID() uint32 { return uint32(l.pid.Load()) }

// Run listens until ctx ends.
func (l *Listener) Run(ctx context.Context) {
	backoff := l.cfg.MinBackoff
	first := true
	for ctx.Err() == nil {
		listened, err := l.session(ctx, !first)
		if ctx.Err() != nil {
			return
		}
		if listened {
			first = false
			backoff = l.cfg.MinBackoff // a session that got going resets the backoff
		}
		if l.cfg.OnDisconnect != nil {
			l.cfg.OnDisconnect(err)
		}
		wait := time.Duration(float64(backoff) * (0.8 + 0.4*rand.Float64()))
		l.cfg.Logger.Warn("listener disconnected; reconnecting", zap.Error(err), zap.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(backoff*2, l.cfg.MaxBackoff)
	}
}

// session connects, LISTENs, runs OnConnect and reads notifications until
// the connection fails or ctx ends.
func (l *Listener) session(ctx context.Context, reconnect bool) (listened bool, err error) {
	conn, err := pgx.ConnectConfig(ctx, l.cfg.ConnConfig.Copy())
	if err != nil {
		return false, err
	}
	defer func() {
		l.connected.Store(false)
		l.pid.Store(0)
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		conn.Close(closeCtx)
		cancel()
	}()
	for _, ch := range l.cfg.Channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{ch}.Sanitize()); err != nil {
			return false, err
		}
	}
	l.pid.Store(int32(conn.PgConn().PID()))
	l.connected.Store(true)
	if reconnect {
		l.reconnects.Add(1)
	}
	l.cfg.Logger.Info("listening", zap.Strings("channels", l.cfg.Channels), zap.Bool("reconnect", reconnect))
	if l.cfg.OnConnect != nil {
		l.cfg.OnConnect(ctx, reconnect)
	}
	for {
		wctx, cancel := context.WithTimeout(ctx, l.cfg.PingInterval)
		n, err := conn.WaitForNotification(wctx)
		cancel()
		switch {
		case err == nil:
			l.cfg.Handle(n)
		case ctx.Err() != nil:
			return true, ctx.Err()
		case errors.Is(err, context.DeadlineExceeded):
			// Idle: make sure the connection is still there.
			pctx, cancel := context.WithTimeout(ctx, l.cfg.PingInterval)
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
