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
//   - on a pool's connections, a statement whose context ends is stopped
//     by a cancel request, and its connection kept (KeepOnCancel): pgx's
//     default closes the connection, and the next statement opens a new
//     one. On Citus a new session costs the coordinator a backend that
//     loads the cluster's metadata and new connections to the worker
//     nodes; under the fault suite's load every timed-out lease renewal
//     closed one, the new sessions' start-up loaded the machine further,
//     and more renewals timed out: a cluster of two worker nodes at a load
//     near 33 left 1,272 executions unfinished 3 minutes after the faults.
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
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
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

// Default is the guard ffd uses unless told otherwise.
func Default() ffdtype.SessionConfig {
	return ffdtype.SessionConfig{
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
func Validate(c ffdtype.SessionConfig) error {
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
func ApplyConn(c ffdtype.SessionConfig, cfg *pgconn.Config) {
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
func Apply(c ffdtype.SessionConfig, cfg *pgx.ConnConfig) { ApplyConn(c, &cfg.Config) }

// ApplyPool sets the guard on every connection of a pool configuration,
// whose statements a cancel request stops (KeepOnCancel).
func ApplyPool(c ffdtype.SessionConfig, cfg *pgxpool.Config) {
	Apply(c, cfg.ConnConfig)
	KeepOnCancel(&cfg.ConnConfig.Config)
}

// CancelGrace is how long a statement whose context ended waits for the
// server to answer the cancel request before its connection is closed
// after all (a server that answers nothing).
const CancelGrace = 3 * time.Second

// KeepOnCancel has a statement whose context ends stopped by a cancel
// request sent at once, its connection kept for the next statement; the
// call returns when the server has answered (at most CancelGrace later).
func KeepOnCancel(cfg *pgconn.Config) {
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: CancelGrace}
	}
}

// CloseOnCancel restores pgx's default on a connection that waits for
// notifications: its waits end by their context every few seconds, with
// nothing running for a cancel request to stop, and must end at once.
func CloseOnCancel(cfg *pgconn.Config) {
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
}

// Guarded reports whether a configuration already carries a guard (set by
// Apply or by hand), so that a connection ffd derives from a caller's
// pool can keep the caller's choice.
func Guarded(cfg *pgconn.Config) bool {
	_, ok := cfg.RuntimeParams["idle_in_transaction_session_timeout"]
	return ok
}
