package store

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DistributionColumn is the column every distributed table is sharded by:
// a flow and all its members, edges, groups, attempts and events share
// one value, so every hot-path statement reads and writes one shard.
const DistributionColumn = "partition_key"

// ReferenceTables are the tables a distributed Postgres copies whole to
// every node: small, written rarely, read beside any shard (lane
// controls, concurrency keys, consumer cursors, schedules, the lanes'
// statistics a daemon samples, keys of executions created before keys
// were placed, and the migration ledger, which every ffd process reads
// at start on whichever node it connects to). LocalTables stay on the
// coordinator alone.
// Every other ff_ table must have DistributionColumn and is distributed
// by it.
//
// LaneTables are distributed by LaneColumn instead, one shard on one
// node: the first in a colocation group of its own, the others colocated
// with it. A controlled claim locks and writes their rows: its lane's
// room (ff_lane_room: the lock capped and rate-limited lanes' claims
// take, and the lane's tokens) and its keys' rows (ff_key: their turns,
// claimed counts and tokens). On a reference table every such write and
// lock took a lock of the table's shard on every node until commit, so
// those claims ran one at a time across the cluster and each committed
// in two phases (docs/flow-control.md). One shard, not a shard per lane:
// a statement over several lanes' keys (a create's, the idle-key
// sweep's) stays one task, and may still lock.
var (
	ReferenceTables = []string{"ff_idempotency_legacy", "ff_lane", "ff_lane_stats", "ff_lane_stats_sample", "ff_outbox_consumer", "ff_schedule", "ff_schema_version", "ff_trigger", "ff_version"}
	LaneTables      = []string{"ff_key", "ff_lane_room"}
	LocalTables     = []string{}
)

// LaneColumn is the column LaneTables are distributed by.
const LaneColumn = "lane"

// Distribution is how one table would be placed on a distributed Postgres.
type Distribution struct {
	Table      string
	Kind       string   // "distributed", "lane" (by LaneColumn), "reference" or "local"
	References []string // the tables its foreign keys reference, sorted
}

// DistributionViolation is one object of the live schema a distributed
// Postgres could not enforce, or a table nobody placed.
type DistributionViolation struct {
	Table, Object, Reason string
}

func (v DistributionViolation) String() string {
	return fmt.Sprintf("%s: %s: %s", v.Table, v.Object, v.Reason)
}

// distributionSQL lists, for every ff_ table of the current schema,
// whether it has its distribution column ($1, or $3 for the tables $2),
// and each unique index (primary keys included), exclusion constraint and
// foreign key: whether it covers that column, and for a foreign key
// whether it pairs the column with the referenced table's and which
// table it references.
const distributionSQL = `
WITH t AS (
	SELECT c.oid, c.relname::text AS name,
		(SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = c.oid
			AND a.attname = CASE WHEN c.relname = ANY ($2::text[]) THEN $3 ELSE $1 END AND NOT a.attisdropped) AS dist
	FROM pg_class c
	WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p') AND c.relname LIKE 'ff\_%'
)
SELECT t.name, '' AS object, '' AS what, t.dist IS NOT NULL AS covers, '' AS refs FROM t
UNION ALL
SELECT t.name, i.relname::text, CASE WHEN x.indisprimary THEN 'primary key' ELSE 'unique index' END,
	coalesce(t.dist = ANY (x.indkey::int2[]), false), ''
FROM t JOIN pg_index x ON x.indrelid = t.oid AND x.indisunique JOIN pg_class i ON i.oid = x.indexrelid
UNION ALL
SELECT t.name, k.conname::text, CASE k.contype WHEN 'f' THEN 'foreign key' ELSE 'exclusion constraint' END,
	CASE k.contype
		WHEN 'f' THEN EXISTS (
			SELECT 1 FROM unnest(k.conkey, k.confkey) AS p(col, refcol)
			JOIN pg_attribute ra ON ra.attrelid = k.confrelid AND ra.attnum = p.refcol
			WHERE p.col = t.dist AND ra.attname = $1)
		ELSE coalesce(t.dist = ANY (k.conkey), false) END,
	coalesce(k.confrelid::regclass::text, '')
FROM t JOIN pg_constraint k ON k.conrelid = t.oid AND k.contype IN ('f', 'x')
UNION ALL
SELECT t.name, g.tgname::text, 'trigger', false, ''
FROM t JOIN pg_trigger g ON g.tgrelid = t.oid AND NOT g.tgisinternal
ORDER BY 1, 2`

// CheckDistribution reads the live schema and reports every table not
// placed (distributed tables need the distribution column), every unique
// index, primary key or exclusion constraint of a distributed table that
// omits the distribution column, and every foreign key a distributed
// Postgres refuses: from a distributed table without the column paired
// with the referenced table's, or from a reference table to a distributed
// one; and every trigger on a table a distributed Postgres copies or
// shards (it would run on the node holding the rows, where nobody
// listens, and Citus refuses to place a table that has one). With no
// violations, the schema can be placed as the returned tables say.
func CheckDistribution(ctx context.Context, db DB) ([]Distribution, []DistributionViolation, error) {
	rows, err := db.Query(ctx, distributionSQL, DistributionColumn, LaneTables, LaneColumn)
	if err != nil {
		return nil, nil, wrap("read the schema's keys", err)
	}
	type object struct {
		Table, Object, What string
		Covers              bool
		Refs                string
	}
	objs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[object])
	if err != nil {
		return nil, nil, wrap("read the schema's keys", err)
	}
	kind := map[string]string{}
	var tables []Distribution
	var bad []DistributionViolation
	for _, o := range objs {
		if o.Object != "" {
			continue
		}
		k := "distributed"
		switch {
		case slices.Contains(ReferenceTables, o.Table):
			k = "reference"
		case slices.Contains(LocalTables, o.Table):
			k = "local"
		case slices.Contains(LaneTables, o.Table):
			k = "lane"
			if !o.Covers {
				bad = append(bad, DistributionViolation{o.Table, "table", "has no " + LaneColumn + ", the column it is distributed by"})
			}
		case !o.Covers:
			bad = append(bad, DistributionViolation{o.Table, "table", "has no " + DistributionColumn + " and is listed neither as a reference nor as a local table"})
		}
		kind[o.Table] = k
		tables = append(tables, Distribution{Table: o.Table, Kind: k})
	}
	refs := map[string][]string{}
	for _, o := range objs {
		if o.Object == "" {
			continue
		}
		if o.Refs != "" && !slices.Contains(refs[o.Table], o.Refs) {
			refs[o.Table] = append(refs[o.Table], o.Refs)
		}
		if r := violation(kind[o.Table], o.What, o.Covers, kind[o.Refs], o.Refs); r != "" {
			bad = append(bad, DistributionViolation{o.Table, o.What + " " + o.Object, r})
		}
	}
	for i := range tables {
		tables[i].References = refs[tables[i].Table]
		slices.Sort(tables[i].References)
	}
	return tables, bad, nil
}

// ColocationAnchor is the distributed table the others are co-located
// with: the flow, whose partition its members and their rows share.
const ColocationAnchor = "ff_flow"

// CitusSettings is the SQL, run on a Citus coordinator after CitusScript,
// that sets what ffd's sessions want of the database on every node (the
// setting follows the database to the worker nodes: Citus propagates
// ALTER DATABASE for the databases it tracks, which includes one where
// the extension was created). A read across the shards (a claim's
// shard hint, each sweep step, the timers' reload, the lane sample)
// otherwise opens up to 16 connections to each node from every session
// that runs one, each a new backend loading the shards' metadata: a
// session's first such read took 400 ms, its second 85, then 10-13;
// with one connection a node, 89, 7, then 4-7 ms. The bench's database
// time per execution on one worker node went from 1,060-2,613 to
// 450-574 µs (docs/scaling.md, "Settings"). A node still reads its
// shards for one statement in one session, in turn, which is what a
// statement that finds a few rows per shard wants.
const CitusSettings = "DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET citus.max_adaptive_executor_pool_size = 1', current_database()); END $$;\n"

// ShardReadConnections is the most connections the session's reads
// across the shards open to each node (citus.max_adaptive_executor_pool_size);
// known is false where the setting is not defined (no Citus, and no
// placeholder of that name).
func ShardReadConnections(ctx context.Context, db DB) (n int, known bool, err error) {
	var v *string
	if err := db.QueryRow(ctx, `SELECT current_setting('citus.max_adaptive_executor_pool_size', true)`).Scan(&v); err != nil {
		return 0, false, wrap("read citus.max_adaptive_executor_pool_size", err)
	}
	if v == nil || *v == "" {
		return 0, false, nil
	}
	n, err = strconv.Atoi(*v)
	if err != nil {
		return 0, false, fmt.Errorf("read citus.max_adaptive_executor_pool_size: %q is no number", *v)
	}
	return n, true, nil
}

// CitusScript is the SQL that places tables on a Citus coordinator:
// reference tables first, then LaneTables by LaneColumn (in their order,
// each after the first colocated with it), then the
// distributed tables co-located with ColocationAnchor, each after the
// tables its foreign keys reference (Citus wants a referenced table
// distributed first).
func CitusScript(tables []Distribution) string {
	tables = slices.Clone(tables)
	slices.SortStableFunc(tables, func(a, b Distribution) int {
		switch {
		case a.Table == b.Table:
			return 0
		case a.Table == ColocationAnchor:
			return -1
		case b.Table == ColocationAnchor:
			return 1
		}
		return 0
	})
	var b strings.Builder
	for _, t := range tables {
		if t.Kind == "reference" {
			fmt.Fprintf(&b, "SELECT create_reference_table('%s');\n", t.Table)
		}
	}
	lanes := ""
	for _, name := range LaneTables {
		i := slices.IndexFunc(tables, func(t Distribution) bool { return t.Table == name && t.Kind == "lane" })
		switch {
		case i < 0:
		case lanes == "":
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s', colocate_with => 'none', shard_count => 1);\n", name, LaneColumn)
			lanes = name
		default:
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s', colocate_with => '%s');\n", name, LaneColumn, lanes)
		}
	}
	placed := map[string]bool{}
	for _, t := range tables {
		if t.Kind != "distributed" {
			placed[t.Table] = true
		}
	}
	anchor := ""
	for progress := true; progress; {
		progress = false
		for _, t := range tables {
			if placed[t.Table] || !allPlaced(t.References, placed, t.Table) {
				continue
			}
			with := "'none'"
			if anchor != "" {
				with = "'" + anchor + "'"
			} else {
				anchor = t.Table
			}
			fmt.Fprintf(&b, "SELECT create_distributed_table('%s', '%s', colocate_with => %s);\n", t.Table, DistributionColumn, with)
			placed[t.Table], progress = true, true
		}
	}
	for _, t := range tables {
		if !placed[t.Table] {
			fmt.Fprintf(&b, "-- %s: its foreign keys form a cycle; place it by hand\n", t.Table)
		}
	}
	return b.String()
}

// allPlaced reports whether every table in refs but self is placed.
func allPlaced(refs []string, placed map[string]bool, self string) bool {
	for _, r := range refs {
		if r != self && !placed[r] {
			return false
		}
	}
	return true
}

// violation says why a distributed Postgres would refuse one key of a
// table of kind, or "" when it would not.
func violation(kind, what string, covers bool, refKind, refs string) string {
	switch {
	case what == "trigger":
		if kind != "local" {
			return "a trigger runs on the node holding the rows, and Citus refuses a " + kind + " table that has one"
		}
	case what != "foreign key":
		if kind == "distributed" && !covers {
			return "omits " + DistributionColumn
		}
		if kind == "lane" && !covers {
			return "omits " + LaneColumn
		}
	case refKind == "reference":
		// Anything may reference a table every node holds.
	case kind == "lane" || refKind == "lane":
		return "a foreign key between tables distributed by different columns (" + refs + ")"
	case kind == "distributed" && refKind == "distributed" && !covers:
		return "does not pair " + DistributionColumn + " with " + refs + "'s"
	case kind == "distributed" && refKind == "local":
		return "a distributed table cannot reference the local table " + refs
	case kind != "distributed" && refKind == "distributed":
		return "a " + kind + " table cannot reference the distributed table " + refs
	}
	return ""
}
