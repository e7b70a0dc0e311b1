package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// VersionRef names a version in a namespace.
type VersionRef struct {
	Namespace, Version string
}

// UnknownVersions returns those of vs no worker announced.
func UnknownVersions(ctx context.Context, db DB, vs []VersionRef) ([]VersionRef, error) {
	nss, names := make([]string, len(vs)), make([]string, len(vs))
	for i, v := range vs {
		nss[i], names[i] = v.Namespace, v.Version
	}
	rows, err := db.Query(ctx, `SELECT w.ns, w.v FROM unnest($1::text[], $2::text[]) AS w(ns, v)
		WHERE NOT EXISTS (SELECT 1 FROM ff_version k WHERE k.namespace = w.ns AND k.version = w.v)`, nss, names)
	if err != nil {
		return nil, wrap("look versions up", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[VersionRef])
	return out, wrap("look versions up", err)
}

// AnnounceVersions records that a worker serves versions in namespace:
// new ones are added, known ones seen again. The time is the database's,
// read first: a distributed Postgres refuses now() in the ON CONFLICT
// update.
func AnnounceVersions(ctx context.Context, db DB, namespace string, versions []string) error {
	now, err := Now(ctx, db)
	if err != nil {
		return err
	}
	_, err = db.Exec(ctx, `INSERT INTO ff_version (namespace, version, announced_at, last_seen_at)
		SELECT $1, v, $3, $3 FROM (SELECT DISTINCT unnest($2::text[])) AS t(v)
		ON CONFLICT (namespace, version) DO UPDATE SET last_seen_at = excluded.last_seen_at`, namespace, versions, now)
	return wrap("announce versions", err)
}

// VersionRow is a version as ff_version holds it, with its executions
// waiting or running, and its open flows.
type VersionRow struct {
	Namespace, Version        string
	AnnouncedAt, LastSeenAt   time.Time
	LiveExecutions, LiveFlows int64
}

// ListVersions lists the announced versions, newest first, with their
// executions pending or running (what the claim and lease indexes hold)
// and their open flows. Three statements, each a plain scan or a
// grouped count, so that a distributed Postgres runs each on its own
// (it refuses a count correlated to a reference table's rows).
func ListVersions(ctx context.Context, db DB, namespace string) ([]VersionRow, error) {
	rows, err := db.Query(ctx, `SELECT namespace, version, announced_at, last_seen_at, 0::bigint, 0::bigint
		FROM ff_version WHERE $1 = '' OR namespace = $1 ORDER BY announced_at DESC, version`, namespace)
	if err != nil {
		return nil, wrap("list versions", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[VersionRow])
	if err != nil || len(out) == 0 {
		return out, wrap("list versions", err)
	}
	live := map[VersionRef][2]int64{}
	count := func(what, sql string, slot int) error {
		rows, err := db.Query(ctx, sql, namespace)
		if err != nil {
			return wrap("count the "+what+" of each version", err)
		}
		var ref VersionRef
		var n int64
		_, err = pgx.ForEachRow(rows, []any{&ref.Namespace, &ref.Version, &n}, func() error {
			c := live[ref]
			c[slot] = n
			live[ref] = c
			return nil
		})
		return wrap("count the "+what+" of each version", err)
	}
	if err := count("executions", `SELECT x.namespace, substr(c, length('ffd.version:') + 1), count(*)
		FROM ff_execution x, unnest(x.required_capabilities) AS c
		WHERE x.state IN ('pending', 'running') AND c LIKE 'ffd.version:%' AND ($1 = '' OR x.namespace = $1)
		GROUP BY 1, 2`, 0); err != nil {
		return nil, err
	}
	if err := count("flows", `SELECT namespace, version, count(*) FROM ff_flow
		WHERE state = 'open' AND version IS NOT NULL AND ($1 = '' OR namespace = $1) GROUP BY 1, 2`, 1); err != nil {
		return nil, err
	}
	for i := range out {
		c := live[VersionRef{out[i].Namespace, out[i].Version}]
		out[i].LiveExecutions, out[i].LiveFlows = c[0], c[1]
	}
	return out, nil
}
