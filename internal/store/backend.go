package store

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Backends lists the server processes of this database's sessions with
// the given application_name (a listener's, say).
func Backends(ctx context.Context, db DB, applicationName string) ([]int32, error) {
	rows, err := db.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1 ORDER BY pid`, applicationName)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[int32])
}

// TerminateBackends ends the given server processes, as an operator's
// pg_terminate_backend would (fault tests and the recovery benchmark).
func TerminateBackends(ctx context.Context, db DB, pids []int32) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM unnest($1::int[]) AS pid`, pids).Scan(&n)
	return n, err
}
