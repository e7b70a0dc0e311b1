package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Distributed reports whether the database db reaches has ff_execution
// distributed by a distributed Postgres (Citus; docs/scaling.md). There a
// statement that locks rows must name one partition, so a few statements
// take another form (routed claims); everywhere else they keep the form
// that reads every partition in one statement, which is faster on one
// Postgres.
//
// The answer is read once per pool (or connection, for a transaction or
// a connection of no pool) and kept: place the tables before starting
// ffd's processes. A plain statement refused as one a distributed
// Postgres cannot run (tables placed since) forgets the answer
// (unroutable), and the next call reads it again.
func Distributed(ctx context.Context, db DB) (bool, error) {
	if routeAll.Load() {
		return true, nil
	}
	if dist, hit := dialects.load(db); hit {
		return dist, nil
	}
	dist, err := distributedTable(ctx, db, "ff_execution")
	if err != nil {
		return false, wrap("read whether the tables are distributed", err)
	}
	dialects.store(db, dist)
	return dist, nil
}

// placement is where the partitions live on a distributed Postgres: the
// shard of each, and the partitions of each shard, in order.
type placement struct {
	shard [256]int64
	parts map[int64][]int16
}

// newPlacement builds the placement whose partition p is on shardOf(p).
func newPlacement(shardOf func(p int16) int64) *placement {
	pl := &placement{parts: map[int64][]int16{}}
	for p := range int16(256) {
		s := shardOf(p)
		pl.shard[p] = s
		pl.parts[s] = append(pl.parts[s], p)
	}
	return pl
}

// of is the shard that holds partition p.
func (pl *placement) of(p int16) int64 { return pl.shard[uint8(p)] }

// routedPlacement is the placement routeAll assumes on one Postgres: a
// partition's shard is its number modulo 32 (Citus's default shard
// count), so that the grouped statements run there too.
var routedPlacement = newPlacement(func(p int16) int64 { return int64(p % 32) })

// placementOf returns where the partitions live where the tables are
// distributed. It is read once per pool like Distributed's answer, and
// forgotten with it (unroutable): a shard split changes it.
func placementOf(ctx context.Context, db DB) (*placement, error) {
	if routeAll.Load() {
		return routedPlacement, nil
	}
	if pl, hit := placements.load(db); hit {
		return pl, nil
	}
	rows, err := db.Query(ctx, `SELECT p::smallint, get_shard_id_for_distribution_column('ff_execution', p::smallint)
		FROM generate_series(0, 255) p`)
	if err != nil {
		return nil, wrap("read the shards of the partitions", err)
	}
	var shards [256]int64
	var p int16
	var shard int64
	if _, err := pgx.ForEachRow(rows, []any{&p, &shard}, func() error {
		shards[uint8(p)] = shard
		return nil
	}); err != nil {
		return nil, wrap("read the shards of the partitions", err)
	}
	pl := newPlacement(func(p int16) int64 { return shards[uint8(p)] })
	placements.store(db, pl)
	return pl, nil
}

// shardMap returns the shard that holds each partition (placementOf).
func shardMap(ctx context.Context, db DB) (func(int16) int64, error) {
	pl, err := placementOf(ctx, db)
	if err != nil {
		return nil, err
	}
	return pl.of, nil
}

// distributedTable reports whether table is distributed by hash (Citus).
func distributedTable(ctx context.Context, db DB, table string) (bool, error) {
	var dist bool
	err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')`).Scan(&dist)
	if err == nil && dist {
		// pg_dist_partition exists only where the extension is.
		err = db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_dist_partition
			WHERE logicalrelid = to_regclass($1) AND partmethod = 'h')`, table).Scan(&dist)
	}
	return dist, err
}

// unroutable returns err, first forgetting Distributed's answer for db
// when err says a distributed Postgres could not run the statement
// (feature_not_supported): the tables were placed after the answer was
// read, and the next call reads it again.
func unroutable(db DB, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "0A000" {
		dialects.forget(db)
		placements.forget(db)
		hints.forget(db)
	}
	return err
}

// routeAll makes Distributed answer true everywhere: a test runs the
// routed statements on one Postgres, where they are valid too.
var routeAll atomic.Bool

// RouteAll makes every statement take its routed form (as on a
// distributed Postgres) until the returned function is called. Tests that
// call it must not run beside other tests of their package (it is
// process-wide): the routed budget (TestCitusBudget) and the routed
// statements' test.
func RouteAll() (restore func()) {
	routeAll.Store(true)
	return func() { routeAll.Store(false) }
}

// What is kept per pool or connection: Distributed's answer, where the
// partitions live, and the claims' shard hints per lane.
var (
	dialects   poolCache[bool]
	placements poolCache[*placement]
	hints      poolCache[*laneHints]
)

// poolCache keeps a value per pool or connection (dialectKey); a db of
// neither keeps none. Connections come and go, so past maxDialects
// entries it starts afresh, and a pool's entry is read again once.
type poolCache[V any] struct {
	m sync.Map
	n atomic.Int64
}

const maxDialects = 4096

func (c *poolCache[V]) load(db DB) (V, bool) {
	var zero V
	key, ok := dialectKey(db)
	if !ok {
		return zero, false
	}
	v, hit := c.m.Load(key)
	if !hit {
		return zero, false
	}
	return v.(V), true
}

func (c *poolCache[V]) store(db DB, v V) {
	if key, ok := dialectKey(db); ok {
		if _, loaded := c.m.Swap(key, v); !loaded {
			c.counted()
		}
	}
}

// loadOrStore returns db's value, keeping v as it when it has none.
func (c *poolCache[V]) loadOrStore(db DB, v V) V {
	key, ok := dialectKey(db)
	if !ok {
		return v
	}
	got, loaded := c.m.LoadOrStore(key, v)
	if !loaded {
		c.counted()
	}
	return got.(V)
}

func (c *poolCache[V]) counted() {
	if c.n.Add(1) > maxDialects {
		c.m.Clear()
		c.n.Store(0)
	}
}

func (c *poolCache[V]) forget(db DB) {
	if key, ok := dialectKey(db); ok {
		c.m.Delete(key)
	}
}

// dialectKey is what Distributed's answer for db is kept under: its pool,
// or its connection.
func dialectKey(db DB) (any, bool) {
	switch d := db.(type) {
	case *pgxpool.Pool:
		return d, true
	case *pgxpool.Conn:
		return d.Conn(), true
	case *pgx.Conn:
		return d, true
	case pgx.Tx:
		return d.Conn(), true
	}
	return nil, false
}

// timePlus is the SQL of the instant t (an expression that reads no
// column: now(), a parameter) plus seconds, an expression that may read
// columns: arithmetic on seconds since the epoch, by immutable functions
// and operators around t. A distributed Postgres evaluates t on the
// coordinator and routes the rest to the shard; it refuses
// `now() + column` outright (timestamptz + interval is STABLE: a day's
// length depends on the time zone). Intervals are in seconds (an interval
// column goes through intervalSeconds), so a day counts 24 hours, as on a
// server in UTC.
func timePlus(t, seconds string) string {
	return "to_timestamp(extract(epoch FROM " + t + ")::float8 + (" + seconds + "))"
}

// nowPlus is timePlus from now().
func nowPlus(seconds string) string { return timePlus("now()", seconds) }

// intervalSeconds is the SQL of the interval column d in seconds.
func intervalSeconds(d string) string { return "extract(epoch FROM " + d + ")::float8" }

// narrowTo returns the condition that narrows an alias's rows to the
// partition param names (`$n`, or `ANY($n::smallint[])` for partitions of
// one shard), or nothing when not routed: a statement every table of which
// names partitions of one shard is what a distributed Postgres routes to
// that shard. On one Postgres the statements keep no such
// condition: a redundant `partition_key = ANY(...)` changed the plans of
// the cascade's statements enough to triple a 1,000-way join's p99.
func narrowTo(routed bool, param string) func(alias string) string {
	return func(alias string) string {
		if !routed {
			return ""
		}
		return " AND " + alias + ".partition_key = " + param
	}
}

// routedPartitions says whether a statement over rows of parts must take
// its routed form, and the partitions it then names (distinct, in
// order): on a distributed Postgres its callers scope their work to one
// shard (a cascade transaction per shard), and rows of two shards are a
// bug.
func routedPartitions(ctx context.Context, db DB, parts []int16) (routed bool, one []int16, err error) {
	if routed, err = Distributed(ctx, db); err != nil || !routed || len(parts) == 0 {
		return routed, nil, err
	}
	shard, err := shardMap(ctx, db)
	if err != nil {
		return true, nil, err
	}
	one = slices.Compact(slices.Sorted(slices.Values(parts)))
	for _, p := range one[1:] {
		if shard(p) != shard(one[0]) {
			return true, nil, fmt.Errorf("a routed statement over partitions %d and %d: a distributed Postgres runs one shard per statement", one[0], p)
		}
	}
	return true, one, nil
}

// ShardsOf groups parts by the shard that holds them, in shard order and,
// within a shard, partition order: on a distributed Postgres, the scopes
// of transactions that each write one shard. On one Postgres, all of
// parts in one group.
func ShardsOf(ctx context.Context, db DB, parts []int16) ([][]int16, error) {
	if dist, err := Distributed(ctx, db); err != nil || !dist {
		return [][]int16{parts}, err
	}
	groups, err := byShard(ctx, db, parts, func(p int16) int16 { return p })
	if err != nil {
		return nil, err
	}
	out := make([][]int16, len(groups))
	for i, g := range groups {
		out[i] = g.parts
	}
	return out, nil
}

// byPartition groups items by partition, in partition order (the global
// lock order): the statements a distributed Postgres routes, one per
// group.
func byPartition[T any](items []T, partition func(T) int16) [][]T {
	at := map[int16][]T{}
	for _, it := range items {
		p := partition(it)
		at[p] = append(at[p], it)
	}
	parts := make([]int16, 0, len(at))
	for p := range at {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	groups := make([][]T, len(parts))
	for i, p := range parts {
		groups[i] = at[p]
	}
	return groups
}

// shardGroup is the items of one shard and the partitions they are in.
type shardGroup[T any] struct {
	items []T
	parts []int16
}

// byShard groups items by the shard that holds their partition, in shard
// order (the order routed statements lock in: shard, then partition, then
// key) and, within a shard, partition order. A statement that names the
// partitions of one shard (`partition_key = ANY($n)`) is one a
// distributed Postgres routes to that shard and lets lock rows, so a
// routed batch needs a statement per group, not per partition (256
// partitions live on 32 shards by default).
func byShard[T any](ctx context.Context, db DB, items []T, partition func(T) int16) ([]shardGroup[T], error) {
	shard, err := shardMap(ctx, db)
	if err != nil {
		return nil, err
	}
	at := map[int64]*shardGroup[T]{}
	var shards []int64
	for _, g := range byPartition(items, partition) {
		p := partition(g[0])
		sg, ok := at[shard(p)]
		if !ok {
			sg = &shardGroup[T]{}
			at[shard(p)] = sg
			shards = append(shards, shard(p))
		}
		sg.parts = append(sg.parts, p)
		sg.items = append(sg.items, g...)
	}
	slices.Sort(shards)
	out := make([]shardGroup[T], len(shards))
	for i, s := range shards {
		out[i] = *at[s]
	}
	return out, nil
}

// routedArgs are a statement's arguments, with the partitions its routed
// form names last.
func routedArgs(routed bool, parts []int16, args ...any) []any {
	if routed {
		return append(args, parts)
	}
	return args
}
