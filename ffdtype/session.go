package ffdtype

import "time"

// SessionConfig bounds what a stuck connection can do to everyone else:
// idle_in_transaction_session_timeout, lock_timeout, TCP keepalives on
// both ends and a connect timeout, sent as startup parameters. See
// docs/operations.md ("Session guard") for why each matters.
type SessionConfig struct {
	// IdleInTransactionTimeout disconnects a session idle inside a
	// transaction this long. Default ffd.DefaultIdleInTransactionTimeout
	// (15 s); 0: no limit.
	IdleInTransactionTimeout time.Duration
	// LockTimeout bounds one statement's wait for a lock. Default
	// ffd.DefaultLockTimeout (10 s); 0: wait forever.
	LockTimeout time.Duration
	// KeepaliveIdle is the silence before the first TCP keepalive probe.
	// Default ffd.DefaultKeepaliveIdle (15 s); 0: the operating system's.
	KeepaliveIdle time.Duration
	// KeepaliveInterval is the time between probes. Default
	// ffd.DefaultKeepaliveInterval (5 s); 0: the operating system's.
	KeepaliveInterval time.Duration
	// KeepaliveCount is how many unanswered probes end the connection.
	// Default ffd.DefaultKeepaliveCount (3); 0: the operating system's.
	KeepaliveCount int
	// ConnectTimeout bounds establishing a connection. Default
	// ffd.DefaultConnectTimeout (10 s); 0: no limit.
	ConnectTimeout time.Duration
}
