package schema_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/testdb"
	"github.com/flowfabric/ffd/migrations"
)

// settingDomains are the columns migration 45 checks once, on write, and
// the domain each takes.
var settingDomains = map[string]string{
	"max_attempts":       "ff_max_attempts",
	"backoff_base":       "ff_backoff_base",
	"backoff_multiplier": "ff_backoff_multiplier",
	"backoff_jitter":     "ff_backoff_jitter",
	"lease_ttl":          "ff_lease_ttl",
	"attempt_timeout":    "ff_attempt_timeout",
}

// Migration 45 moves the checks of an execution's settings onto domains:
// in place (no file of the table or of its indexes is rewritten), every
// setting still refused when written wrong, and an update that leaves a
// setting alone no longer checks it. Its Down section gives the table
// checks back.
func TestSettingsCheckedOnce(t *testing.T) {
	t.Parallel()
	ctx, db := migratedTo(t, 44)
	before := files(ctx, t, db)
	if _, err := schema.UpTo(ctx, db.Pool, 45, 0); err != nil {
		t.Fatal(err)
	}
	if after := files(ctx, t, db); !slices.Equal(after, before) {
		t.Fatalf("files of ff_execution and its indexes after migration 45:\n%v\nwant them as before (no rewrite, no index rebuilt):\n%v", after, before)
	}
	if got := columnTypes(ctx, t, db); !maps.Equal(got, settingDomains) {
		t.Fatalf("the settings' types after migration 45: %v, want %v", got, settingDomains)
	}
	if n := settingTableChecks(ctx, t, db); n != 0 {
		t.Fatalf("%d table checks of ff_execution read only settings after migration 45, want 0", n)
	}

	// A row whose max_attempts no check guards any more: an update that
	// does not set it passes, one that sets it is refused.
	const id = "01890000-0000-7000-8000-0000000000f1"
	for _, q := range []string{
		`ALTER DOMAIN ff_max_attempts DROP CONSTRAINT ff_max_attempts_range`,
		`INSERT INTO ff_execution (partition_key, execution_id, lane, state, max_attempts) VALUES (1, '` + id + `', 'l', 'pending', 0)`,
		`ALTER DOMAIN ff_max_attempts ADD CONSTRAINT ff_max_attempts_range CHECK (VALUE >= 1 AND VALUE <= 1000) NOT VALID`,
		`UPDATE ff_execution SET priority = 1, run_at = now() WHERE execution_id = '` + id + `'`,
	} {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	var pgErr *pgconn.PgError
	_, err := db.Pool.Exec(ctx, `UPDATE ff_execution SET max_attempts = max_attempts + 0 WHERE execution_id = '`+id+`'`)
	if !errors.As(err, &pgErr) || pgErr.Code != "23514" || pgErr.ConstraintName != "ff_max_attempts_range" {
		t.Fatalf("an update that sets max_attempts 0: %v, want ff_max_attempts_range violated", err)
	}
	if _, err := db.Pool.Exec(ctx, `DELETE FROM ff_execution WHERE execution_id = '`+id+`'`); err != nil {
		t.Fatal(err)
	}

	down(ctx, t, db, "00045_settings_checked_once.sql")
	if got := columnTypes(ctx, t, db); len(got) != 0 {
		t.Fatalf("after migration 45's Down, settings still of a domain: %v", got)
	}
	if n := settingTableChecks(ctx, t, db); n != len(settingDomains) {
		t.Fatalf("after migration 45's Down, %d table checks read only settings, want %d", n, len(settingDomains))
	}
}

// files are the storage files of ff_execution and of its indexes.
func files(ctx context.Context, t *testing.T, db *testdb.DB) []string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, `SELECT c.relname || ':' || c.relfilenode FROM pg_class c
		WHERE c.oid = 'ff_execution'::regclass
		   OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'ff_execution'::regclass)
		ORDER BY c.relname`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// columnTypes are the ff_execution columns of a domain type, and the
// domain.
func columnTypes(ctx context.Context, t *testing.T, db *testdb.DB) map[string]string {
	t.Helper()
	rows, err := db.Pool.Query(ctx, `SELECT a.attname, ty.typname FROM pg_attribute a JOIN pg_type ty ON ty.oid = a.atttypid
		WHERE a.attrelid = 'ff_execution'::regclass AND a.attnum > 0 AND NOT a.attisdropped AND ty.typtype = 'd'`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var col, typ string
	if _, err := pgx.ForEachRow(rows, []any{&col, &typ}, func() error {
		out[col] = typ
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// settingTableChecks counts the table checks of ff_execution that read
// settings and nothing else.
func settingTableChecks(ctx context.Context, t *testing.T, db *testdb.DB) int {
	t.Helper()
	names := slices.Collect(maps.Keys(settingDomains))
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint c
		WHERE c.conrelid = 'ff_execution'::regclass AND c.contype = 'c'
		  AND (SELECT array_agg(a.attname::text) FROM pg_attribute a
		       WHERE a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)) <@ $1::text[]`, names).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// down runs a migration's Down section.
func down(ctx context.Context, t *testing.T, db *testdb.DB, file string) {
	t.Helper()
	src, err := migrations.FS.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, sql, ok := strings.Cut(string(src), "-- +goose Down")
	if !ok {
		t.Fatalf("%s has no Down section", file)
	}
	if _, err := db.Pool.Exec(ctx, sql); err != nil {
		t.Fatalf("%s down: %v", file, err)
	}
}
