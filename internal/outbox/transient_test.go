package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/outbox"
)

// Which failures a consumer loop retries: the server's or a node's
// connection going away, and concurrency races; never bad input, missing
// objects or privileges, a handler's error or the caller's cancellation.
func TestTransient(t *testing.T) {
	t.Parallel()
	pg := func(code, where string) error { return &pgconn.PgError{Code: code, Message: "m", Where: where} }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown", pg("57P01", ""), true},
		{"connection failure", pg("08006", ""), true},
		{"too many connections", pg("53300", ""), true},
		{"deadlock", pg("40P01", ""), true},
		{"lock timeout", pg("55P03", ""), true},
		{"a Citus worker node's connection broke", fmt.Errorf("register consumer: %w",
			pg("XX000", "while executing command on 127.0.0.1:9701")), true},
		{"a Citus transaction's node connection failed", &pgconn.PgError{Code: "XX000",
			Message: "failure on connection marked as essential: 127.0.0.1:9702"}, true},
		{"a Citus node's TLS connection ended", &pgconn.PgError{Code: "XX000",
			Message: "SSL SYSCALL error: EOF detected"}, true},
		{"an internal error of the server itself", pg("XX000", ""), false},
		{"a node's own error with its SQLSTATE", pg("23505", "while executing command on 127.0.0.1:9701"), false},
		{"missing database", pg("3D000", ""), false},
		{"no privilege", pg("42501", ""), false},
		{"bad credentials", pg("28P01", ""), false},
		{"nodes changed", fmt.Errorf("stream: %w", outbox.ErrNodesChanged), true},
		{"broken pipe", io.ErrUnexpectedEOF, true},
		{"cancelled", context.Canceled, false},
		{"validation", fmt.Errorf("x: %w", ffdtype.ErrValidation), false},
		{"handler", &outbox.HandlerError{Consumer: "c", Err: errors.New("boom")}, false},
		{"wal level", outbox.ErrWALLevel, false},
	} {
		if got := outbox.Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
