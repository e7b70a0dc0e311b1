package store

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A statement a distributed Postgres refused makes Distributed read its
// answer again; any other error keeps it.
func TestUnroutableForgets(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none") // never connects
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	dialects.store(pool, false)
	other := &pgconn.PgError{Code: "40001"}
	if got := unroutable(pool, other); !errors.Is(got, other) {
		t.Fatalf("unroutable changed the error: %v", got)
	}
	if _, ok := dialects.load(pool); !ok {
		t.Fatal("a serialization failure dropped the pool's answer")
	}
	refused := &pgconn.PgError{Code: "0A000", Message: "could not run distributed query with FOR UPDATE/SHARE commands"}
	if got := unroutable(pool, refused); !errors.Is(got, refused) {
		t.Fatalf("unroutable changed the error: %v", got)
	}
	if _, ok := dialects.load(pool); ok {
		t.Fatal("a statement Citus refused kept the pool's answer")
	}
}
