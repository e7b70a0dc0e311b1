package store

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A statement a distributed Postgres refused makes Distributed read its
// answer again; any other error keeps it.
func TestUnroutableForgets(t *testing.T) {
	t.Parallel()
	pool := unconnected(t)
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

// A routed statement names the partitions of one shard: repeats and order
// of its rows do not matter, and rows of two shards are refused.
func TestRoutedPartitions(t *testing.T) {
	t.Parallel()
	pool := unconnected(t)
	dialects.store(pool, true)
	placements.store(pool, routedPlacement) // partition p on shard p % 32
	for _, c := range []struct {
		parts []int16
		want  []int16
		err   bool
	}{
		{parts: []int16{35, 3, 35, 67}, want: []int16{3, 35, 67}},
		{parts: []int16{7}, want: []int16{7}},
		{parts: []int16{3, 4}, err: true},
		{parts: nil},
	} {
		routed, one, err := routedPartitions(context.Background(), pool, c.parts)
		if !routed || (err != nil) != c.err || !slices.Equal(one, c.want) {
			t.Errorf("routedPartitions(%v) = %v, %v, %v; want true, %v, error %v", c.parts, routed, one, err, c.want, c.err)
		}
	}
	shards, err := ShardsOf(context.Background(), pool, []int16{36, 4, 3, 35})
	if err != nil || len(shards) != 2 || !slices.Equal(shards[0], []int16{3, 35}) || !slices.Equal(shards[1], []int16{4, 36}) {
		t.Fatalf("ShardsOf = %v, %v; want [[3 35] [4 36]]", shards, err)
	}
}

// unconnected is a pool that never connects: the answers a test stores
// for it are all it has.
func unconnected(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
