package outbox

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// HandlerError is an error returned by a consumer's handler: never
// retried by the consumer loops, always returned to their caller.
type HandlerError struct {
	Consumer string
	Err      error
}

func (e *HandlerError) Error() string { return "consumer " + e.Consumer + " handler: " + e.Err.Error() }
func (e *HandlerError) Unwrap() error { return e.Err }

// Transient reports whether err is worth retrying on a new connection:
// the connection or the server went away (a crash restart, a terminated
// backend, a network blip), the server is starting or out of
// connections, or a transaction lost a concurrency race. Everything else
// is permanent and a consumer loop must stop and say so: bad credentials
// (SQLSTATE class 28), a missing database (3D000), a missing privilege
// such as REPLICATION (42501), a replication slot of another database
// (55000), invalid input, a dropped consumer, a handler's error, a
// cancelled context.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, ErrNodesChanged) {
		return true
	}
	var he *HandlerError
	if errors.As(err, &he) || errors.Is(err, ErrWALLevel) {
		return false
	}
	for _, sentinel := range []error{ffdtype.ErrValidation, ffdtype.ErrNotFound, ffdtype.ErrConflict, ffdtype.ErrStaleRevision, ffdtype.ErrLeaseLost, ffdtype.ErrAlreadyTerminal} {
		if errors.Is(err, sentinel) {
			return false
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code[:2] == "08": // connection exception
			return true
		case pgErr.Code == "XX000" && (strings.Contains(pgErr.Where, "while executing command on") ||
			strings.HasPrefix(pgErr.Message, "failure on connection marked as essential") ||
			strings.HasPrefix(pgErr.Message, "SSL SYSCALL error")):
			// Citus relays a worker node's error with its SQLSTATE; one
			// without (libpq's own: the connection to a node broke, as
			// when it restarts, or libpq's word that a node's TLS
			// connection ended), and its own word that a connection its
			// transaction needed failed, come as internal_error.
			return true
		case pgErr.Code[:2] == "53": // insufficient resources (too many connections, out of memory)
			return true
		}
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin shutdown, crash shutdown, cannot connect now
			"40001", "40P01", // serialization failure, deadlock
			"55P03", // lock not available (lock_timeout)
			"25P03", // idle in transaction timeout: our own session was cut
			"57014": // query cancelled
			return true
		}
		return false
	}
	// A connection that could not be made without the server refusing it
	// (refused, unreachable, or no answer within the connect timeout: a
	// hung or partitioned server) is worth another try.
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		return true
	}
	// Any other deadline is the caller's.
	if errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	// No answer from the server at all: the connection broke.
	var netErr net.Error
	return errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		pgconn.SafeToRetry(err) || isConnClosed(err)
}

// isConnClosed matches pgx's "conn closed" (a connection the pool or pgx
// already knows is dead), which carries no type of its own.
func isConnClosed(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "conn closed" {
			return true
		}
	}
	return false
}

// RetryTransient calls fn until it succeeds or fails permanently, waiting
// with a Backoff between transient failures (Transient) and logging each
// one at Warn as msg. It returns nil once fn succeeds, fn's permanent
// error, or ctx's error when ctx ends first. The start-up of the daemon,
// of consumers and of following tails waits for the database this way.
func RetryTransient(ctx context.Context, log *zap.Logger, msg string, fn func() error) error {
	retry := NewBackoff()
	for {
		err := fn()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !Transient(err) {
			return err
		}
		log.Warn(msg, zap.Error(err), zap.Duration("retry_in", retry.Next()))
		if !retry.Wait(ctx) {
			return ctx.Err()
		}
	}
}
