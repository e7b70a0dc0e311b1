package ffd

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/session"
)

// Session guard defaults (DefaultSessionConfig).
const (
	DefaultIdleInTransactionTimeout = session.DefaultIdleInTransactionTimeout
	DefaultLockTimeout              = session.DefaultLockTimeout
	DefaultKeepaliveIdle            = session.DefaultKeepaliveIdle
	DefaultKeepaliveInterval        = session.DefaultKeepaliveInterval
	DefaultKeepaliveCount           = session.DefaultKeepaliveCount
	DefaultConnectTimeout           = session.DefaultConnectTimeout
)

// SessionConfig is the session guard (ffdtype.SessionConfig).
type SessionConfig = ffdtype.SessionConfig

// DefaultSessionConfig is the guard ffd's own connections use.
func DefaultSessionConfig() SessionConfig { return session.Default() }

// ConfigurePool puts the session guard s (nil: DefaultSessionConfig) on
// every connection of cfg. Build the pool you hand to NewClient this way:
// a process that freezes inside one of its transactions is then cut off by
// the server instead of holding row locks the daemon and other workers
// wait for. A statement whose context ends is stopped by a cancel request
// and its connection kept, where pgx's default closes it
// (docs/operations.md, "Session guard").
func ConfigurePool(cfg *pgxpool.Config, s *SessionConfig) error {
	guard := session.Default()
	if s != nil {
		guard = *s
	}
	if err := session.Validate(guard); err != nil {
		return err
	}
	session.ApplyPool(guard, cfg)
	return nil
}

// NewPool connects a pool to connString with the session guard s (nil:
// DefaultSessionConfig).
func NewPool(ctx context.Context, connString string, s *SessionConfig) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse connection string: %w", err)
	}
	if err := ConfigurePool(cfg, s); err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	return pool, nil
}

// ConfigurePoolForPgBouncer prepares cfg for a PgBouncer in transaction
// pooling, where consecutive statements of one client may run on
// different server connections, so nothing may rest on session state:
//
//   - statements are sent with the simple protocol (no prepared
//     statement outlives its round trip);
//   - the session guard's settings are not sent as startup parameters
//     (PgBouncer refuses unknown ones): set them on the role instead,
//     for example ALTER ROLE app SET idle_in_transaction_session_timeout
//     = '15s' (docs/scaling.md);
//   - workers must not LISTEN through the bouncer: give them a direct
//     WorkerConfig.ListenConnConfig, or set WorkerConfig.PollOnly.
//
// Clients and workers need nothing else; the daemon and WAL consumers
// need session state and keep a direct connection.
func ConfigurePoolForPgBouncer(cfg *pgxpool.Config) {
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	// The simple protocol sends every argument as text and must know its
	// type without asking the server: name the Go types ffd passes that
	// pgx does not map by itself.
	after := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		tm := conn.TypeMap()
		for _, t := range []struct {
			v    any
			name string
		}{
			{uuid.UUID{}, "uuid"}, {&uuid.UUID{}, "uuid"}, {[]uuid.UUID{}, "_uuid"}, {[]*uuid.UUID{}, "_uuid"},
			{map[string]any{}, "jsonb"}, {&map[string]any{}, "jsonb"}, {[]*map[string]any{}, "_jsonb"},
		} {
			tm.RegisterDefaultPgType(t.v, t.name)
		}
		if after != nil {
			return after(ctx, conn)
		}
		return nil
	}
	for _, p := range []string{"idle_in_transaction_session_timeout", "lock_timeout", "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count"} {
		delete(cfg.ConnConfig.RuntimeParams, p)
	}
}
