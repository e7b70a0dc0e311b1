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
// new ones are added, known ones seen again.
func AnnounceVersions(ctx context.Context, db DB, namespace string, versions []string) error {
	_, err := db.Exec(ctx, `INSERT INTO ff_version (namespace, version) SELECT $1, v FROM unnest($2::text[]) AS v
		ON CONFLICT (namespace, version) DO UPDATE SET last_seen_at = now()`, namespace, versions)
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
// and their open flows.
func ListVersions(ctx context.Context, db DB, namespace string) ([]VersionRow, error) {
	rows, err := db.Query(ctx, `SELECT v.namespace, v.version, v.announced_at, v.last_seen_at,
			(SELECT count(*) FROM ff_execution x WHERE x.namespace = v.namespace AND x.state IN ('pending', 'running')
				AND x.required_capabilities @> ARRAY['ffd.version:' || v.version]),
			(SELECT count(*) FROM ff_flow f WHERE f.namespace = v.namespace AND f.version = v.version AND f.state = 'open')
		FROM ff_version v WHERE $1 = '' OR v.namespace = $1
		ORDER BY v.announced_at DESC, v.version`, namespace)
	if err != nil {
		return nil, wrap("list versions", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[VersionRow])
	return out, wrap("list versions", err)
}
