package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// StaleTable is an ff_ table whose planner statistics said it held far
// fewer rows than it did.
type StaleTable struct {
	Name      string
	Estimated int64 // pg_class.reltuples: rows at the last ANALYZE or VACUUM; -1: never
	Live      int64 // pg_stat_user_tables.n_live_tup: rows now, as counted since
}

// RefreshStaleStatistics analyzes, through ff_refresh_statistics
// (migration 00021), the ff_ tables holding at least minRows live rows
// that their planner statistics put below 1/factor of them, and returns
// them as they were before, and those never analyzed (an estimate of -1)
// holding at least minRows/factor (migration 00028): the planner sizes
// such a table from its pages, but has no statistics of its columns and
// guesses 0.5% of the rows for any test of one. And ff_execution, when
// the lane statistics sampled after its last analysis count at least
// minRows live executions and its statistics put under 1/factor of them
// in the live states (migration 00038): then StaleTable's Estimated and
// Live are those of the live rows; and ff_execution when its statistics
// put it under minRows/factor rows and a read of up to minRows of its
// rows finds them all (Live is then minRows), and ff_key by the same read
// (migration 00040); and either, never analyzed, when a read of up to
// minRows/factor of its rows finds them all. The function runs as the
// tables' owner, so that a role that only writes rows may call it.
//
// A queue drains and refills. Analyzed while empty, a table keeps a row
// estimate of zero however much it refills, and the planner plans every
// statement on it as if it were empty, until autovacuum analyzes it again
// (up to autovacuum_naptime later): a batch of endings joined to
// ff_execution scanned the whole table or re-read its input once per row,
// and a 1,000-member cancel_flow took 0.5-1.2 s instead of 50 ms.
//
// On a distributed Postgres it does nothing: every ff_ table is
// distributed or a reference table there, the node ffd connects to holds
// only their empty shells, and the shards' statistics are each node's
// autovacuum's. The function's read of the catalogs is what would remain,
// and there the catalogs list every shard, which Citus hides from the
// session row by row: 96 ms a call under the bench's load, every
// StatisticsInterval, for nothing (docs/scaling.md, "Periodic work").
func RefreshStaleStatistics(ctx context.Context, db DB, minRows int64, factor float64) ([]StaleTable, error) {
	if dist, err := Distributed(ctx, db); err != nil || dist {
		return nil, wrap("refresh table statistics", err)
	}
	rows, err := db.Query(ctx, `SELECT table_name, estimated_rows, live_rows FROM ff_refresh_statistics($1, $2)`, minRows, factor)
	if err != nil {
		return nil, wrap("refresh table statistics", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StaleTable])
	return out, wrap("refresh table statistics", err)
}
