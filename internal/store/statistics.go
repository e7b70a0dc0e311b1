package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// StaleTable is an ff_ table whose planner statistics say it holds far
// fewer rows than it does.
type StaleTable struct {
	Name      string
	Estimated int64 // pg_class.reltuples: rows at the last ANALYZE or VACUUM
	Live      int64 // pg_stat_user_tables.n_live_tup: rows now, as counted since
}

// StaleStatistics lists the ff_ tables of the current schema holding at
// least minRows live rows whose planner statistics put them below
// 1/factor of those: a table analyzed while nearly empty that has filled
// since. A table never analyzed (reltuples -1) is estimated from its size,
// which is fine, so it is left out. RefreshStaleStatistics says why it
// matters.
func StaleStatistics(ctx context.Context, db DB, minRows int64, factor float64) ([]StaleTable, error) {
	rows, err := db.Query(ctx, `SELECT c.relname::text, c.reltuples::bigint, s.n_live_tup
		FROM pg_class c
		JOIN pg_stat_user_tables s ON s.relid = c.oid
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND c.relname LIKE 'ff\_%'
			AND c.reltuples >= 0 AND s.n_live_tup >= $1 AND c.reltuples * $2 < s.n_live_tup
		ORDER BY c.relname`, minRows, factor)
	if err != nil {
		return nil, wrap("read table statistics", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StaleTable])
	return out, wrap("read table statistics", err)
}

// RefreshStaleStatistics analyzes the tables StaleStatistics would list,
// through ff_refresh_statistics (migration 00021), which runs as the
// tables' owner so that a role that only writes rows may call it, and
// returns them as they were before.
//
// A queue drains and refills. Analyzed while empty, a table keeps a row
// estimate of zero however much it refills, and the planner plans every
// statement on it as if it were empty, until autovacuum analyzes it again
// (up to autovacuum_naptime later): a batch of endings joined to
// ff_execution scanned the whole table or re-read its input once per row,
// and a 1,000-member cancel_flow took 0.5-1.2 s instead of 50 ms.
func RefreshStaleStatistics(ctx context.Context, db DB, minRows int64, factor float64) ([]StaleTable, error) {
	rows, err := db.Query(ctx, `SELECT table_name, estimated_rows, live_rows FROM ff_refresh_statistics($1, $2)`, minRows, factor)
	if err != nil {
		return nil, wrap("refresh table statistics", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[StaleTable])
	return out, wrap("refresh table statistics", err)
}
