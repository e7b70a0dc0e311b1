package store

import (
	"context"
	"encoding/binary"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Ages says how long finished executions and flows are kept: Default for
// every namespace but those in ByNamespace. An age of 0 or less keeps
// them forever.
type Ages struct {
	Default     time.Duration
	ByNamespace map[string]time.Duration
	// Dead, when not 0, is how long dead letters (DeadFilter) are kept
	// instead, in every namespace; less than 0 keeps them forever.
	Dead time.Duration
}

// youngest is the shortest age that deletes anything; 0 when none does.
func (a Ages) youngest() time.Duration {
	y := a.Default
	if a.Dead > 0 && (y <= 0 || a.Dead < y) {
		y = a.Dead
	}
	for _, age := range a.ByNamespace {
		if age > 0 && (y <= 0 || age < y) {
			y = age
		}
	}
	return max(y, 0)
}

// arrays are the per-namespace ages as SQL parameters.
func (a Ages) arrays() (names []string, ages []int64) {
	for ns, age := range a.ByNamespace {
		names, ages = append(names, ns), append(ages, micros(max(age, 0)))
	}
	return names, ages
}

// uuidAt is the smallest v7 uuid of the millisecond t: every execution id
// minted before t sorts below it.
func uuidAt(t time.Time) uuid.UUID {
	var u uuid.UUID
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6], u[8] = 0x70, 0x80
	return u
}

// deleteExecutionsSQL deletes a batch of finished solo executions with
// their attempts. It walks the primary key, id first (ids are v7 uuids, ordered by
// creation) below the youngest cutoff's uuid, so it reads only rows old
// enough to qualify, and skips rows another transaction holds.
var (
	deleteExecutionsSQL       = deleteExecutionsStatement(false)
	deleteExecutionsRoutedSQL = deleteExecutionsStatement(true)
)

// deleteExecutionsStatement is deleteExecutionsSQL, narrowed to the one
// partition $7 when routed: every table of it then names that partition,
// which is how a distributed Postgres routes it to one shard. A dead
// letter is kept for $6 instead of its namespace's age when $6 is not 0.
func deleteExecutionsStatement(routed bool) string {
	one := narrowTo(routed, "$7")
	return `
WITH ages(namespace, age_us) AS (SELECT * FROM unnest($1::text[], $2::bigint[])),
victims AS (
	SELECT e.partition_key, e.execution_id
	FROM ff_execution e LEFT JOIN ages a ON a.namespace = e.namespace
	CROSS JOIN LATERAL (SELECT CASE WHEN $6::bigint <> 0 AND ` + deadTestIn(one) + `
		THEN $6::bigint ELSE coalesce(a.age_us, $4) END AS age_us) k
	WHERE e.execution_id < $3 AND e.flow_id IS NULL AND e.terminal_at IS NOT NULL` + one("e") + `
		AND k.age_us > 0
		AND e.terminal_at < now() - k.age_us * interval '1 microsecond'
	ORDER BY e.execution_id
	LIMIT $5
	FOR UPDATE OF e SKIP LOCKED),
attempts AS (
	DELETE FROM ff_attempt t USING victims v
	WHERE t.partition_key = v.partition_key AND t.execution_id = v.execution_id` + one("t") + `),
signals AS (
	DELETE FROM ff_signal s USING victims v
	WHERE s.partition_key = v.partition_key AND s.flow_id IS NULL AND s.execution_id = v.execution_id` + one("s") + `),
waits AS (
	DELETE FROM ff_wait w USING victims v
	WHERE w.partition_key = v.partition_key AND w.execution_id = v.execution_id` + one("w") + `),
legacy AS (
	DELETE FROM ff_idempotency_legacy l USING victims v
	WHERE l.partition_key = v.partition_key AND l.execution_id = v.execution_id` + one("l") + `)
DELETE FROM ff_execution e USING victims v
WHERE e.partition_key = v.partition_key AND e.execution_id = v.execution_id` + one("e") + ``
}

// DeleteFinishedExecutions deletes up to limit solo executions (flow
// members go with their flow) that finished longer ago than their
// namespace's age, with their attempts, signals and waits; their idempotency keys are free
// again. Outbox events are not touched: outbox retention deletes them
// once every consumer has read them.
func DeleteFinishedExecutions(ctx context.Context, db DB, ages Ages, limit int) (int, error) {
	dead := micros(ages.Dead)
	if ages.Dead < 0 {
		dead = -1
	}
	return deleteFinished(ctx, db, "executions", deleteExecutionsSQL, deleteExecutionsRoutedSQL,
		`SELECT DISTINCT partition_key FROM ff_execution WHERE flow_id IS NULL AND terminal_at < now() - $1::bigint * interval '1 microsecond'`,
		ages, limit, func(youngest time.Duration) any { return uuidAt(time.Now().Add(-youngest)) }, dead)
}

// deleteFinished runs one retention statement: $1 and $2 the namespaces'
// ages, $3 the bound that lets it read only old rows (bound of the
// youngest age), $4 the default age, $5 the batch size, then extra. On a distributed
// Postgres it runs routed, once per partition that candidates reads
// holds old rows in ($1 the youngest age), each its own transaction,
// until limit rows are gone.
func deleteFinished(ctx context.Context, db DB, what, sql, routed, candidates string, ages Ages, limit int, bound func(time.Duration) any, extra ...any) (int, error) {
	youngest := ages.youngest()
	if youngest == 0 {
		return 0, nil
	}
	names, us := ages.arrays()
	dist, err := Distributed(ctx, db)
	if err != nil {
		return 0, err
	}
	if !dist {
		tag, err := db.Exec(ctx, sql, append([]any{names, us, bound(youngest), micros(max(ages.Default, 0)), limit}, extra...)...)
		if err != nil {
			return 0, wrap("delete finished "+what, err)
		}
		return int(tag.RowsAffected()), nil
	}
	rows, err := db.Query(ctx, candidates, micros(youngest))
	if err != nil {
		return 0, wrap("find finished "+what, err)
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[int16])
	if err != nil {
		return 0, wrap("find finished "+what, err)
	}
	slices.Sort(parts)
	n := 0
	for _, p := range parts {
		args := append([]any{names, us, bound(youngest), micros(max(ages.Default, 0)), limit - n}, extra...)
		tag, err := db.Exec(ctx, routed, append(args, p)...)
		if err != nil {
			return n, wrap("delete finished "+what, err)
		}
		if n += int(tag.RowsAffected()); n >= limit {
			break
		}
	}
	return n, nil
}

// deleteFlowsSQL deletes a batch of finished flows with everything they
// hold. A flow qualifies once it and every member finished longer ago
// than its namespace's age, and no event of it waits for the cascade.
var (
	deleteFlowsSQL       = deleteFlowsStatement(false)
	deleteFlowsRoutedSQL = deleteFlowsStatement(true)
)

// deleteFlowsStatement is deleteFlowsSQL, narrowed to the one partition
// $6 when routed (deleteExecutionsStatement).
func deleteFlowsStatement(routed bool) string {
	one := narrowTo(routed, "$6")
	return `
WITH ages(namespace, age_us) AS (SELECT * FROM unnest($1::text[], $2::bigint[])),
victims AS (
	SELECT f.partition_key, f.flow_id
	FROM ff_flow f LEFT JOIN ages a ON a.namespace = f.namespace
	WHERE f.state <> 'open' AND f.terminal_at < now() - $3::bigint * interval '1 microsecond'` + one("f") + `
		AND coalesce(a.age_us, $4) > 0
		AND f.terminal_at < now() - coalesce(a.age_us, $4) * interval '1 microsecond'
		AND NOT EXISTS (
			SELECT 1 FROM ff_execution x
			WHERE x.partition_key = f.partition_key AND x.flow_id = f.flow_id
				AND (x.terminal_at IS NULL OR x.terminal_at >= now() - coalesce(a.age_us, $4) * interval '1 microsecond'))
		AND NOT EXISTS (
			SELECT 1 FROM ff_completion_event c
			WHERE c.dispatched_at IS NULL AND c.partition_key = f.partition_key AND c.flow_id = f.flow_id)
		AND f.compensation IS DISTINCT FROM 'armed'
		AND NOT EXISTS (
			SELECT 1 FROM ff_subflow sf
			WHERE sf.partition_key = f.partition_key AND sf.flow_id = f.flow_id AND sf.ended_at IS NULL)
	ORDER BY f.terminal_at
	LIMIT $5
	FOR UPDATE OF f SKIP LOCKED),
signals AS (
	DELETE FROM ff_signal s USING victims v
	WHERE s.partition_key = v.partition_key AND s.flow_id = v.flow_id` + one("s") + `),
waits AS (
	DELETE FROM ff_wait w USING victims v
	WHERE w.partition_key = v.partition_key AND w.flow_id = v.flow_id` + one("w") + `),
spawned AS (
	DELETE FROM ff_spawned p USING victims v
	WHERE p.partition_key = v.partition_key AND p.flow_id = v.flow_id` + one("p") + `),
subflows AS (
	DELETE FROM ff_subflow sf USING victims v
	WHERE sf.partition_key = v.partition_key AND sf.flow_id = v.flow_id` + one("sf") + `),
compensations AS (
	DELETE FROM ff_compensation cp USING victims v
	WHERE cp.partition_key = v.partition_key AND cp.flow_id = v.flow_id` + one("cp") + `),
cancels AS (
	DELETE FROM ff_pending_cancel_group p USING victims v
	WHERE p.partition_key = v.partition_key AND p.flow_id = v.flow_id` + one("p") + `),
groups AS (
	DELETE FROM ff_edge_group g USING victims v
	WHERE g.partition_key = v.partition_key AND g.flow_id = v.flow_id` + one("g") + `),
edges AS (
	DELETE FROM ff_edge e USING victims v
	WHERE e.partition_key = v.partition_key AND e.flow_id = v.flow_id` + one("e") + `),
attempts AS (
	DELETE FROM ff_attempt t USING ff_execution x, victims v
	WHERE x.partition_key = v.partition_key AND x.flow_id = v.flow_id
		AND t.partition_key = x.partition_key AND t.execution_id = x.execution_id` + one("t") + one("x") + `),
members AS (
	DELETE FROM ff_execution x USING victims v
	WHERE x.partition_key = v.partition_key AND x.flow_id = v.flow_id` + one("x") + `)
DELETE FROM ff_flow f USING victims v
WHERE f.partition_key = v.partition_key AND f.flow_id = v.flow_id` + one("f") + ``
}

// DeleteFinishedFlows deletes up to limit finished flows older than their
// namespace's age, with their members, attempts, edges, groups,
// signals, waits, spawn records, sub-flow steps and compensations. A
// flow whose compensations have not started, or whose sub-flow steps
// the linker has not finished with, is kept until they have.
func DeleteFinishedFlows(ctx context.Context, db DB, ages Ages, limit int) (int, error) {
	return deleteFinished(ctx, db, "flows", deleteFlowsSQL, deleteFlowsRoutedSQL,
		`SELECT DISTINCT partition_key FROM ff_flow WHERE state <> 'open' AND terminal_at < now() - $1::bigint * interval '1 microsecond'`,
		ages, limit, func(youngest time.Duration) any { return micros(youngest) })
}
