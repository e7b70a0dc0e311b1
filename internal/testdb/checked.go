package testdb

import (
	"context"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
)

// Checked gives a test a database of its own and a context that ends
// after limit, and checks the invariants over the whole database when the
// test ends: every test that writes proves them on what it wrote.
func Checked(t *testing.T, limit time.Duration) (context.Context, *DB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	db := New(t)
	t.Cleanup(func() {
		defer cancel()
		if err := store.CheckInvariants(ctx, db.Pool); err != nil {
			t.Errorf("invariants after the test: %v", err)
		}
	})
	return ctx, db
}
