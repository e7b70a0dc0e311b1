package store

import (
	"context"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Backlog is the daemon's outstanding work: completion events not yet
// dispatched and sibling-cancel groups not yet drained.
func Backlog(ctx context.Context, db DB) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL)
		+ (SELECT count(*) FROM ff_pending_cancel_group)`).Scan(&n)
	return n, wrap("count the daemon's backlog", err)
}

// FlowEventCounts counts a flow's outbox rows: its completion events by
// outcome (the flow's own included) and its members' lease events by type.
func FlowEventCounts(ctx context.Context, db DB, flowID uuid.UUID) (completions map[Outcome]int, leases map[LeaseEventType]int, err error) {
	completions, err = countBy[Outcome](ctx, db, `SELECT outcome, count(*) FROM ff_completion_event
		WHERE flow_id = $1 GROUP BY outcome`, flowID)
	if err != nil {
		return nil, nil, wrap("count the flow's completion events", err)
	}
	leases, err = countBy[LeaseEventType](ctx, db, `SELECT l.event_type, count(*)
		FROM ff_lease_event l JOIN ff_execution e USING (partition_key, execution_id)
		WHERE e.flow_id = $1 GROUP BY l.event_type`, flowID)
	return completions, leases, wrap("count the flow's lease events", err)
}

func countBy[K ~string](ctx context.Context, db DB, sql string, args ...any) (map[K]int, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	out := map[K]int{}
	var k K
	var n int
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
		out[k] = n
		return nil
	})
	return out, err
}

// LaneDepth is how many live executions of a lane are in one state.
type LaneDepth struct {
	Lane  string `db:"lane"`
	State State  `db:"state"`
	Count int64  `db:"count"`
}

// LiveByLane counts the live executions (blocked, pending, running) of
// every lane by state.
func LiveByLane(ctx context.Context, db DB) ([]LaneDepth, error) {
	rows, err := db.Query(ctx, `SELECT lane, state, count(*) AS count FROM ff_execution
		WHERE state IN ('blocked', 'pending', 'running') GROUP BY lane, state`)
	if err != nil {
		return nil, wrap("count live executions by lane", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[LaneDepth])
	return out, wrap("count live executions by lane", err)
}
