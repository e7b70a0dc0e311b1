// Package session bounds the blast radius of a stuck connection. Every
// connection ffd opens (daemon pool and listener, worker listener, CLI
// commands, outbox consumers, the WAL stream) carries the same guard:
//
//   - idle_in_transaction_session_timeout: a process that stops between
//     two statements of a transaction (SIGSTOP, a GC pause gone wrong, a
//     partitioned host) is disconnected by the server after this long, and
//     the row locks it held are released. Without it one frozen daemon
//     holding a flow lock stalls every completion of that flow, on every
//     worker, for as long as TCP allows.
//   - lock_timeout: a statement waits at most this long for a row lock;
//     the caller gets SQLSTATE 55P03 and retries on its own terms.
//   - TCP keepalives on both ends (server: tcp_keepalives_*, client: the
//     dialer's keepalive), so a peer that vanished is noticed in about
//     Idle + Interval × Count instead of the operating system's hours.
//   - a connect timeout, so a server that accepts nothing cannot hang a
//     start.
//
// Settings travel as startup parameters, so they cost nothing per
// statement and survive pool reconnects.
package session

import (
	"context"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/bound"
)

// Defaults.
const (
	DefaultIdleInTransactionTimeout = bound.DefaultIdleInTransactionTimeout
	DefaultLockTimeout              = bound.DefaultLockTimeout
	DefaultKeepaliveIdle            = bound.DefaultKeepaliveIdle
	DefaultKeepaliveInterval        = bound.DefaultKeepaliveInterval
	DefaultKeepaliveCount           = bound.DefaultKeepaliveCount
	DefaultConnectTimeout           = bound.DefaultConnectTimeout
)

// Config is the guard. The zero value is not the defaults: use Default, or
// set each field (0 disables a timeout, or leaves a keepalive setting to
// the operating system).
type Config struct {
	// IdleInTransactionTimeout disconnects a session idle inside a
	// transaction this long. Default DefaultIdleInTransactionTimeout
	// (15 s); 0: no limit.
	IdleInTransactionTimeout time.Duration
	// LockTimeout bounds one statement's wait for a lock. Default
	// DefaultLockTimeout (10 s); 0: wait forever.
	LockTimeout time.Duration
	// KeepaliveIdle is the silence before the first TCP keepalive probe.
	// Default DefaultKeepaliveIdle (15 s); 0: the operating system's.
	KeepaliveIdle time.Duration
	// KeepaliveInterval is the time between probes. Default
	// DefaultKeepaliveInterval (5 s); 0: the operating system's.
	KeepaliveInterval time.Duration
	// KeepaliveCount is how many unanswered probes end the connection.
	// Default DefaultKeepaliveCount (3); 0: the operating system's.
	KeepaliveCount int
	// ConnectTimeout bounds establishing a connection. Default
	// DefaultConnectTimeout (10 s); 0: no limit.
	ConnectTimeout time.Duration
}

// Default is the guard ffd uses unless told otherwise.
func Default() Config {
	return Config{
		IdleInTransactionTimeout: DefaultIdleInTransactionTimeout,
		LockTimeout:              DefaultLockTimeout,
		KeepaliveIdle:            DefaultKeepaliveIdle,
		KeepaliveInterval:        DefaultKeepaliveInterval,
		KeepaliveCount:           DefaultKeepaliveCount,
		ConnectTimeout:           DefaultConnectTimeout,
	}
}

// Validate checks every field against internal/bound; field names are the
// Go ones (the CLI checks its flags under their own names).
func (c Config) Validate() error {
	for _, err := range []error{
		bound.IdleInTransactionTimeout.Check("IdleInTransactionTimeout", c.IdleInTransactionTimeout),
		bound.LockTimeout.Check("LockTimeout", c.LockTimeout),
		bound.KeepaliveIdle.Check("KeepaliveIdle", c.KeepaliveIdle),
		bound.KeepaliveInterval.Check("KeepaliveInterval", c.KeepaliveInterval),
		bound.KeepaliveCount.Check("KeepaliveCount", c.KeepaliveCount),
		bound.ConnectTimeout.Check("ConnectTimeout", c.ConnectTimeout),
	} {
		if err != nil {
			return err
		}
	}
	return nil
}

// millis renders a duration as a Postgres setting in milliseconds.
func millis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }

// ApplyConn sets the guard on a pgconn configuration (the WAL stream's
// replication connection uses one directly).
func (c Config) ApplyConn(cfg *pgconn.Config) {
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = millis(c.IdleInTransactionTimeout)
	cfg.RuntimeParams["lock_timeout"] = millis(c.LockTimeout)
	if c.KeepaliveIdle > 0 {
		cfg.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(int(c.KeepaliveIdle.Seconds()))
	}
	if c.KeepaliveInterval > 0 {
		cfg.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(int(c.KeepaliveInterval.Seconds()))
	}
	if c.KeepaliveCount > 0 {
		cfg.RuntimeParams["tcp_keepalives_count"] = strconv.Itoa(c.KeepaliveCount)
	}
	cfg.ConnectTimeout = c.ConnectTimeout
	dialer := &net.Dialer{
		Timeout: c.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: c.KeepaliveIdle, Interval: c.KeepaliveInterval, Count: c.KeepaliveCount,
		},
	}
	if c.KeepaliveIdle == 0 {
		dialer.KeepAliveConfig.Idle = -1 // -1: leave to the operating system (net.KeepAliveConfig)
	}
	if c.KeepaliveInterval == 0 {
		dialer.KeepAliveConfig.Interval = -1
	}
	if c.KeepaliveCount == 0 {
		dialer.KeepAliveConfig.Count = -1
	}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, addr)
	}
}

// Apply sets the guard on a connection configuration.
func (c Config) Apply(cfg *pgx.ConnConfig) { c.ApplyConn(&cfg.Config) }

// ApplyPool sets the guard on every connection of a pool configuration.
func (c Config) ApplyPool(cfg *pgxpool.Config) { c.Apply(cfg.ConnConfig) }

// Guarded reports whether a configuration already carries a guard (set by
// Apply or by hand), so that a connection ffd derives from a caller's
// pool can keep the caller's choice.
func Guarded(cfg *pgconn.Config) bool {
	_, ok := cfg.RuntimeParams["idle_in_transaction_session_timeout"]
	return ok
}
