package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// deadTest says an execution e is a dead letter: a solo execution that
// ended failed or expired and has not been rerun. Its first line is
// ff_execution_dead's predicate, so a read of dead letters is a read of
// that index. The rerun is looked for on e's partition, where a rerun is
// minted (ff_execution_rerun).
var deadTest = deadTestIn(narrowTo(false, ""))

// deadTestIn is deadTest with the rerun's table narrowed by one, as a
// routed statement narrows each of its tables to its partition.
func deadTestIn(one func(alias string) string) string {
	return `e.flow_id IS NULL AND e.state IN ('failed', 'expired')
	AND NOT EXISTS (SELECT 1 FROM ff_execution r WHERE r.partition_key = e.partition_key AND r.rerun_of = e.execution_id` + one("r") + `)`
}

// DeadFilter selects dead letters. Empty fields select any.
type DeadFilter struct {
	Namespace, Lane, Kind string
	// ErrorContains matches the last error, case-insensitively.
	ErrorContains string
	// IDs, when set, selects only these executions.
	IDs []ffdtype.ExecutionID
	// After is the keyset cursor: only ids above it.
	After *uuid.UUID
	Limit int
}

// ListDead reads up to f.Limit dead letters in id (creation) order.
func ListDead(ctx context.Context, db DB, f DeadFilter) ([]*ffdtype.Execution, error) {
	var parts []int16
	var ids []pgtype.UUID
	if f.IDs != nil {
		parts, ids = make([]int16, len(f.IDs)), make([]pgtype.UUID, len(f.IDs))
		for i, id := range f.IDs {
			parts[i], ids[i] = id.Partition, pgUUID(id.UUID)
		}
	}
	rows, err := db.Query(ctx, `SELECT `+execColumns+` FROM ff_execution e
		WHERE `+deadTest+`
			AND ($1::text IS NULL OR e.namespace = $1)
			AND ($2::text IS NULL OR e.lane = $2)
			AND ($3::text IS NULL OR e.kind = $3)
			AND ($4::text IS NULL OR strpos(lower(coalesce(e.last_error, '')), lower($4)) > 0)
			AND ($5::uuid IS NULL OR e.execution_id > $5)
			AND ($6::smallint[] IS NULL OR (e.partition_key = ANY ($6) AND e.execution_id = ANY ($7)))
		ORDER BY e.execution_id LIMIT $8`,
		nullIfEmpty(f.Namespace), nullIfEmpty(f.Lane), nullIfEmpty(f.Kind), nullIfEmpty(f.ErrorContains),
		f.After, parts, ids, f.Limit)
	if err != nil {
		return nil, wrap("list dead letters", err)
	}
	xs, err := collectExecutions(rows)
	return xs, wrap("list dead letters", err)
}
