package testdb

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/store"
)

// Fixture is what a database test starts from: its own database, a
// context that bounds the whole test, and the helpers every package's
// tests used to copy. Packages embed it in their own fixture and add what
// only they need.
type Fixture struct {
	T    *testing.T
	Ctx  context.Context
	DB   *DB
	Pool *pgxpool.Pool
}

// Setup gives a test a database of its own and a context that ends after
// limit.
func Setup(t *testing.T, limit time.Duration) *Fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	t.Cleanup(cancel)
	db := New(t)
	return &Fixture{T: t, Ctx: ctx, DB: db, Pool: db.Pool}
}

// Checked is Setup that also checks the invariants over the whole
// database when the test ends: every test that writes proves them on what
// it wrote. (Tests that write rows no engine path would write, such as
// bare outbox events, use Setup.)
func Checked(t *testing.T, limit time.Duration) *Fixture {
	t.Helper()
	f := Setup(t, limit)
	// Registered after Setup's cancel, so it runs first: cleanups run last
	// registered, first run.
	t.Cleanup(func() {
		if err := store.CheckInvariants(f.Ctx, f.Pool); err != nil {
			t.Errorf("invariants after the test: %v", err)
		}
	})
	return f
}

// Count runs a query that returns one integer.
func (f *Fixture) Count(sql string, args ...any) int {
	f.T.Helper()
	var n int
	if err := f.Pool.QueryRow(f.Ctx, sql, args...).Scan(&n); err != nil {
		f.T.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Exec runs a statement and fails the test if it fails.
func (f *Fixture) Exec(sql string, args ...any) {
	f.T.Helper()
	if _, err := f.Pool.Exec(f.Ctx, sql, args...); err != nil {
		f.T.Fatalf("%s: %v", sql, err)
	}
}

// WaitFor polls cond until it holds, for at most two minutes; it bounds
// a wait, it does not measure speed.
func (f *Fixture) WaitFor(what string, cond func() bool) {
	f.T.Helper()
	const budget = 2 * time.Minute
	deadline := time.Now().Add(budget)
	for !cond() {
		if time.Now().After(deadline) {
			f.T.Fatalf("waited %s (WaitFor's budget) for %s", budget, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ServerDir is a temporary directory, removed when the test ends, that a
// private PostgreSQL started by the test can use: when tests run as root
// the server runs as the postgres OS user, which must reach it.
func ServerDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ffd-test-server-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
