// Package schema applies ffd's embedded migrations and checks that a
// database's schema is one this binary understands.
//
// Migrations are run by goose (its Provider API): each file in its own
// transaction, under a Postgres session advisory lock so that any number of
// `ffd migrate up` started together apply each version once, and recorded
// in the ledger table LedgerTable. Every other command only reads the
// ledger: it never creates or changes schema objects.
package schema

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/trigger"
	"github.com/flowfabric/ffd/migrations"
)

// LedgerTable records every applied migration version.
const LedgerTable = "ff_schema_version"

// advisoryLockID is the session advisory lock migrations run under:
// the bytes of "ffd.migr" read as a big-endian int64.
const advisoryLockID int64 = 0x6666642e6d696772

// ErrSchemaTooNew is matched by the error returned when a database has a
// schema version newer than this binary knows.
var ErrSchemaTooNew = errors.New("schema newer than this ffd")

// ErrSchemaBehind is matched when migrations are pending.
var ErrSchemaBehind = errors.New("schema migrations pending")

// VersionError says which schema version was found and which was expected.
type VersionError struct {
	Found, Expected int64
}

func (e *VersionError) Error() string {
	if e.Found > e.Expected {
		return fmt.Sprintf("database schema is at version %d but this ffd knows versions up to %d: upgrade ffd before running it against this database", e.Found, e.Expected)
	}
	return fmt.Sprintf("database schema is at version %d but this ffd expects version %d: run `ffd migrate up`", e.Found, e.Expected)
}

// Is matches ErrSchemaTooNew or ErrSchemaBehind as appropriate.
func (e *VersionError) Is(target error) bool {
	return (target == ErrSchemaTooNew && e.Found > e.Expected) ||
		(target == ErrSchemaBehind && e.Found < e.Expected)
}

// Latest is the newest migration version embedded in this binary.
func Latest() int64 {
	entries, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil || len(entries) == 0 {
		panic("schema: no embedded migrations") // a build defect, caught by every test
	}
	var latest int64
	for _, name := range entries {
		v, err := goose.NumericComponent(name)
		if err != nil {
			panic(fmt.Sprintf("schema: migration %s: %v", name, err))
		}
		latest = max(latest, v)
	}
	return latest
}

// Current reads the database's schema version from the ledger; 0 when ffd
// has never been migrated there.
func Current(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, LedgerTable).Scan(&exists); err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	err := pool.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+LedgerTable+` WHERE is_applied`).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Check returns nil when the database is exactly at Latest, and a
// *VersionError naming both versions otherwise.
func Check(ctx context.Context, pool *pgxpool.Pool) error {
	found, err := Current(ctx, pool)
	if err != nil {
		return err
	}
	if want := Latest(); found != want {
		return &VersionError{Found: found, Expected: want}
	}
	return nil
}

// Applied is one migration that Up applied.
type Applied struct {
	Version  int64
	Name     string
	Duration time.Duration
}

// Up applies every pending migration, each in its own transaction, under the
// advisory lock. It refuses a database newer than this binary. It waits up
// to lockWait for another migrator to finish (0 means ten minutes).
func Up(ctx context.Context, pool *pgxpool.Pool, lockWait time.Duration) ([]Applied, error) {
	return UpTo(ctx, pool, Latest(), lockWait)
}

// UpTo is Up stopping at version: to upgrade one step at a time, or to
// build a database as an older release left it.
func UpTo(ctx context.Context, pool *pgxpool.Pool, version int64, lockWait time.Duration) ([]Applied, error) {
	if err := checkCreateSchema(ctx, pool); err != nil {
		return nil, err
	}
	found, err := Current(ctx, pool)
	if err != nil {
		return nil, err
	}
	if found > Latest() {
		return nil, &VersionError{Found: found, Expected: Latest()}
	}
	p, db, err := provider(pool, lockWait)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	results, err := p.UpTo(ctx, version)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	out := make([]Applied, 0, len(results))
	for _, r := range results {
		out = append(out, Applied{Version: r.Source.Version, Name: r.Source.Path, Duration: r.Duration})
	}
	if version >= Latest() {
		// The SQL API runs the latest schema's statements: it is
		// installed on a current schema only, and again on every Up.
		if err := InstallAPI(ctx, pool); err != nil {
			return out, err
		}
	}
	return out, nil
}

// checkCreateSchema refuses a connection whose search_path names no
// existing schema: ffd's tables go to the first schema of the search_path
// (public by default, or ?search_path=NAME in the URL), and Postgres's own
// message ("no schema has been selected to create in") does not say so.
func checkCreateSchema(ctx context.Context, pool *pgxpool.Pool) error {
	var current *string
	var path string
	if err := pool.QueryRow(ctx, `SELECT current_schema(), current_setting('search_path')`).Scan(&current, &path); err != nil {
		return fmt.Errorf("read the search_path: %w", err)
	}
	if current == nil {
		first := strings.TrimSpace(strings.Split(path, ",")[0])
		return fmt.Errorf("the connection's search_path (%s) names no existing schema for ffd's tables: CREATE SCHEMA %s first (with CREATE granted to the migrating role), or change search_path in the URL", path, first)
	}
	return nil
}

func provider(pool *pgxpool.Pool, lockWait time.Duration) (*goose.Provider, *sql.DB, error) {
	if lockWait <= 0 {
		lockWait = 10 * time.Minute
	}
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(advisoryLockID),
		lock.WithLockTimeout(1, uint64(max(1, lockWait/time.Second))),
	)
	if err != nil {
		return nil, nil, fmt.Errorf("migration lock: %w", err)
	}
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS,
		goose.WithSessionLocker(locker),
		goose.WithTableName(LedgerTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("load migrations: %w", err)
	}
	return p, db, nil
}

// apiLimits are the Go API's limits and defaults, for the SQL API.
func apiLimits() store.APILimits {
	return store.APILimits{
		DefaultNamespace: leases.DefaultNamespace, DefaultMaxPayloadBytes: leases.DefaultMaxPayloadBytes,
		MaxMaxPayloadBytes: leases.MaxMaxPayloadBytes, MaxNameLength: leases.MaxNameLength,
		MaxKindLength: leases.MaxKindLength, MaxIdempotencyKey: leases.MaxIdempotencyKey,
		MaxCapabilities: leases.MaxCapabilities, MaxCapabilityLength: leases.MaxCapabilityLength,
		MaxTagsBytes: leases.MaxTagsBytes, DefaultMaxAttempts: leases.DefaultMaxAttempts,
		MaxMaxAttempts: leases.MaxMaxAttempts, MaxReasonBytes: leases.MaxReasonBytes, MaxByBytes: leases.MaxByBytes,
		MaxEventKey: trigger.MaxEventKey, MaxCreateMany: leases.MaxCreateMany, MaxSubmitNodes: flows.MaxSubmitNodes,
		MaxSubmitEdges: flows.MaxSubmitEdges, DefaultLeaseTTL: leases.DefaultLeaseTTL,
		DefaultBackoffBase: leases.DefaultBackoffBase, DefaultBackoffMax: leases.DefaultBackoffMax,
		DefaultBackoffFactor: leases.DefaultBackoffFactor, DefaultBackoffJitter: leases.DefaultBackoffJitter,
		VersionCapabilityPrefix: ffdtype.VersionCapabilityPrefix, DefaultCancelReason: leases.DefaultCancelReason,
		DefaultCancelledBy: leases.DefaultCancelledBy, FlowCancelReason: flows.FlowCancelReason,
		FlowCancelledBy: flows.FlowCancelledBy, DefaultDependencyKind: flows.DefaultDependencyKind,
		SQLStates: fault.SQLStates, MaxValue: fault.MaxValue, Ranges: ranges(),
		NamePattern: leases.NamePattern, NameDetail: leases.NameDetail,
	}
}

// ranges are the Go API's checks of a create's integer fields, by field.
func ranges() map[string]fault.Range {
	out := map[string]fault.Range{}
	for _, r := range []fault.Range{leases.PriorityRange, leases.MaxAttemptsRange, leases.LeaseTTLRange,
		leases.AttemptTimeoutRange, leases.DeadlineRange, leases.DelayRange} {
		out[r.Field] = r
	}
	return out
}

// InstallAPI (re)creates the SQL API's functions (docs/sql.md) from this
// binary's statements and limits; Up runs it once the schema is current.
func InstallAPI(ctx context.Context, pool *pgxpool.Pool) error {
	return store.InstallAPI(ctx, pool, advisoryLockID, apiLimits())
}

// APICurrent reports whether the SQL API's functions are this binary's
// (false: missing, or installed by another binary; `ffd migrate up`
// installs them).
func APICurrent(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	return store.APICurrent(ctx, pool, apiLimits())
}
