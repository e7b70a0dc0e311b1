package store

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
)

// The reads `ffd bench` measures with. They run after (or beside) a
// workload, never on the engine's paths, and report times taken from the
// rows themselves (database clock) rather than from the bench's host.

func count(ctx context.Context, db DB, what, sql string, args ...any) (int, error) {
	var n int
	err := db.QueryRow(ctx, sql, args...).Scan(&n)
	return n, wrap(what, err)
}

func micro(ctx context.Context, db DB, what, sql string, args ...any) (time.Duration, error) {
	var us float64
	err := db.QueryRow(ctx, sql, args...).Scan(&us)
	return time.Duration(us) * time.Microsecond, wrap(what, err)
}

func durations(ctx context.Context, db DB, what, sql string, args ...any) ([]time.Duration, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, wrap(what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (time.Duration, error) {
		var us float64
		err := r.Scan(&us)
		return time.Duration(us) * time.Microsecond, err
	})
	return out, wrap(what, err)
}

// CountInLanes counts the executions of the lanes in state s.
func CountInLanes(ctx context.Context, db DB, s ffdtype.State, lanes ...string) (int, error) {
	return count(ctx, db, "count executions by lane", `SELECT count(*) FROM ff_execution
		WHERE lane = ANY($1) AND state = $2`, lanes, s)
}

// Unfinished counts a lane's pending and running executions. Both counts
// read partial indexes, so a poll costs the same over a table of a million
// finished rows as over an empty one.
func Unfinished(ctx context.Context, db DB, lane string) (int, error) {
	return count(ctx, db, "count unfinished executions", `SELECT (SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = 'pending')
		+ (SELECT count(*) FROM ff_execution WHERE state = 'running' AND lane = $1)`, lane)
}

// CompletedFirstTime counts a lane's executions completed on their first
// attempt.
func CompletedFirstTime(ctx context.Context, db DB, lane string) (int, error) {
	return count(ctx, db, "count first-attempt completions", `SELECT count(*) FROM ff_execution
		WHERE lane = $1 AND state = 'completed' AND attempt = 1`, lane)
}

// NamespaceBacklog counts a namespace's undispatched completion events,
// plus every sibling-cancel group when withCancels is set.
func NamespaceBacklog(ctx context.Context, db DB, namespace string, withCancels bool) (int, error) {
	return count(ctx, db, "count the namespace's backlog", `SELECT (SELECT count(*) FROM ff_completion_event
			WHERE namespace = $1 AND dispatched_at IS NULL)
		+ CASE WHEN $2 THEN (SELECT count(*) FROM ff_pending_cancel_group) ELSE 0 END`, namespace, withCancels)
}

// CompletedFlows counts a namespace's completed flows.
func CompletedFlows(ctx context.Context, db DB, namespace string) (int, error) {
	return count(ctx, db, "count completed flows", `SELECT count(*) FROM ff_flow
		WHERE namespace = $1 AND state = 'completed'`, namespace)
}

// ReadFlowState reads a flow's state.
func ReadFlowState(ctx context.Context, db DB, partition int16, flowID uuid.UUID) (ffdtype.FlowState, error) {
	var s ffdtype.FlowState
	err := db.QueryRow(ctx, `SELECT state FROM ff_flow WHERE partition_key = $1 AND flow_id = $2`,
		partition, flowID).Scan(&s)
	return s, wrap("read flow state", err)
}

// FlowSpan is from the first attempt of root to the end of its flow.
func FlowSpan(ctx context.Context, db DB, flowID uuid.UUID, root ffdtype.ExecutionID) (time.Duration, error) {
	return micro(ctx, db, "read the flow's span", `SELECT extract(epoch FROM f.terminal_at - a.started_at) * 1e6
		FROM ff_flow f, ff_attempt_all a
		WHERE f.partition_key = $1 AND f.flow_id = $2 AND a.partition_key = $1 AND a.execution_id = $3 AND a.attempt = 1`,
		root.Partition, flowID, root.UUID)
}

// Analyze vacuums and analyzes the execution and outbox tables.
func Analyze(ctx context.Context, db DB) error {
	_, err := db.Exec(ctx, `VACUUM (ANALYZE) ff_execution, ff_attempt, ff_lease_event, ff_completion_event`)
	return wrap("vacuum and analyze", err)
}

// laneAttemptsSQL is every attempt of a lane's executions ($1): those
// held on the execution rows and the ff_attempt rows. Written out rather
// than read through ff_attempt_all: a join into that view cannot reach
// its execution-row branch by index (a UNION ALL member with a WHERE is
// not flattened), so each joined row would scan the table.
const laneAttemptsSQL = `
	SELECT e.attempt, e.attempt_started_at AS started_at, e.terminal_at AS ended_at
	FROM ff_execution e WHERE e.lane = $1 AND e.attempt_started_at IS NOT NULL
	UNION ALL
	SELECT a.attempt, a.started_at, a.ended_at
	FROM ff_attempt a JOIN ff_execution e USING (partition_key, execution_id) WHERE e.lane = $1`

// AttemptSpan is from a lane's first attempt start to its last attempt
// end.
func AttemptSpan(ctx context.Context, db DB, lane string) (time.Duration, error) {
	return micro(ctx, db, "read the lane's span", `SELECT extract(epoch FROM max(a.ended_at) - min(a.started_at)) * 1e6
		FROM (`+laneAttemptsSQL+`) a`, lane)
}

// AttemptDurations returns how long each attempt of a lane ran.
func AttemptDurations(ctx context.Context, db DB, lane string) ([]time.Duration, error) {
	return durations(ctx, db, "read attempt durations", `SELECT extract(epoch FROM a.ended_at - a.started_at) * 1e6
		FROM (`+laneAttemptsSQL+`) a`, lane)
}

// HopDelays returns, for every edge of a namespace's flows, the time from
// the upstream's completion event to the downstream's first claim.
func HopDelays(ctx context.Context, db DB, namespace string) ([]time.Duration, error) {
	return durations(ctx, db, "read hop delays", `SELECT extract(epoch FROM a.started_at - c.occurred_at) * 1e6
		FROM ff_edge ed
		JOIN ff_flow f ON f.partition_key = ed.partition_key AND f.flow_id = ed.flow_id AND f.namespace = $1
		JOIN ff_completion_event c ON c.partition_key = ed.partition_key AND c.execution_id = ed.upstream_id
		JOIN ff_execution d ON d.partition_key = ed.partition_key AND d.execution_id = ed.downstream_id
		CROSS JOIN LATERAL (
			-- The downstream's first attempt: a row when it was retried, else held on it.
			SELECT coalesce((SELECT r.started_at FROM ff_attempt r
				WHERE r.partition_key = d.partition_key AND r.execution_id = d.execution_id AND r.attempt = 1),
				CASE WHEN d.attempt = 1 THEN d.attempt_started_at END) AS started_at) a
		WHERE a.started_at IS NOT NULL`, namespace)
}

// ReadyDelays returns, for every edge of a namespace's flows, the time from
// the upstream's completion event to the downstream becoming claimable.
func ReadyDelays(ctx context.Context, db DB, namespace string) ([]time.Duration, error) {
	return durations(ctx, db, "read ready delays", `SELECT extract(epoch FROM d.run_at - c.occurred_at) * 1e6
		FROM ff_edge ed
		JOIN ff_flow f ON f.partition_key = ed.partition_key AND f.flow_id = ed.flow_id AND f.namespace = $1
		JOIN ff_completion_event c ON c.partition_key = ed.partition_key AND c.execution_id = ed.upstream_id
		JOIN ff_execution d ON d.partition_key = ed.partition_key AND d.execution_id = ed.downstream_id`, namespace)
}

// JoinDelay is from the last completion among join's upstreams in
// upstreamLane to join becoming claimable.
func JoinDelay(ctx context.Context, db DB, join ffdtype.ExecutionID, upstreamLane string) (time.Duration, error) {
	return micro(ctx, db, "read the join's delay", `SELECT extract(epoch FROM j.run_at - (SELECT max(c.occurred_at) FROM ff_completion_event c
			JOIN ff_execution m ON m.partition_key = c.partition_key AND m.execution_id = c.execution_id
			WHERE m.flow_id = j.flow_id AND m.lane = $2)) * 1e6
		FROM ff_execution j WHERE j.partition_key = $1 AND j.execution_id = $3`, join.Partition, upstreamLane, join.UUID)
}

// FencedCancellations counts a lane's cancelled executions whose lease was
// taken at epoch and which have their cancelled completion event.
func FencedCancellations(ctx context.Context, db DB, lane string, epoch int64) (int, error) {
	return count(ctx, db, "count fenced cancellations", `SELECT count(*)
		FROM ff_execution e JOIN ff_completion_event c USING (partition_key, execution_id)
		WHERE e.lane = $1 AND e.state = 'cancelled' AND e.lease_epoch = $2 AND c.outcome = 'cancelled'`, lane, epoch)
}

// CancelSpread is from winner's completion event to the last cancellation
// in lane.
func CancelSpread(ctx context.Context, db DB, lane string, winner ffdtype.ExecutionID) (time.Duration, error) {
	return micro(ctx, db, "read the cancellation spread", `SELECT extract(epoch FROM
			(SELECT max(terminal_at) FROM ff_execution WHERE lane = $1 AND state = 'cancelled')
			- (SELECT occurred_at FROM ff_completion_event WHERE partition_key = $2 AND execution_id = $3)) * 1e6`,
		lane, winner.Partition, winner.UUID)
}

// ReclaimDelay is from the last first-attempt lease's expiry in lane to
// the last second attempt's start.
func ReclaimDelay(ctx context.Context, db DB, lane string) (time.Duration, error) {
	return micro(ctx, db, "read the reclaim delay", `SELECT extract(epoch FROM
			(SELECT max(a.started_at) FROM (`+laneAttemptsSQL+`) a WHERE a.attempt = 2)
			- (SELECT max(l.lease_expires_at) FROM ff_lease_event l JOIN ff_execution e USING (partition_key, execution_id)
				WHERE e.lane = $1 AND l.event_type = 'expired' AND l.attempt = 1)) * 1e6`, lane)
}

// DeleteNamespace deletes every row of a namespace's executions and flows,
// children first.
func DeleteNamespace(ctx context.Context, db DB, namespace string) error {
	for _, s := range []string{
		`DELETE FROM ff_pending_cancel_group WHERE flow_id IN (SELECT flow_id FROM ff_flow WHERE namespace = $1)`,
		`DELETE FROM ff_edge WHERE flow_id IN (SELECT flow_id FROM ff_flow WHERE namespace = $1)`,
		`DELETE FROM ff_edge_group WHERE flow_id IN (SELECT flow_id FROM ff_flow WHERE namespace = $1)`,
		`DELETE FROM ff_attempt WHERE execution_id IN (SELECT execution_id FROM ff_execution WHERE namespace = $1)`,
		`DELETE FROM ff_lease_event WHERE execution_id IN (SELECT execution_id FROM ff_execution WHERE namespace = $1)`,
		`DELETE FROM ff_completion_event WHERE namespace = $1`,
		`DELETE FROM ff_execution WHERE namespace = $1`,
		`DELETE FROM ff_flow WHERE namespace = $1`,
	} {
		if _, err := db.Exec(ctx, s, namespace); err != nil {
			return wrap("delete namespace "+namespace, err)
		}
	}
	return nil
}
