package store

// The invariants of docs/design.md (section 10), checked over a whole
// database. Tests of every layer that writes executions, edges or events
// run CheckInvariants after they act; it reads only, so it is safe on a
// live database, though a check racing writers can see a transient state
// (run it when the writers are done).
import (
	"context"
	"errors"
	"fmt"

	"github.com/flowfabric/ffd/ffdtype"
)

// check is one invariant as a query returning the rows that violate it.
type check struct {
	name string
	sql  string
	// outcomes: $1 and $2 are the states and their completion outcomes
	// (OutcomeOf), so that no check spells the mapping itself.
	outcomes bool
}

var always = []check{
	{"every terminal execution has exactly one completion event, and a live one none", `
		SELECT e.execution_id::text, e.state, count(c.event_id)
		FROM ff_execution e
		LEFT JOIN ff_completion_event c ON c.partition_key = e.partition_key AND c.execution_id = e.execution_id
		GROUP BY e.partition_key, e.execution_id, e.state
		HAVING count(c.event_id) <> CASE WHEN e.state IN ('completed', 'failed', 'cancelled', 'skipped', 'expired') THEN 1 ELSE 0 END`, false},
	{"a completion event's outcome matches its execution's state", `
		SELECT c.event_id::text, c.outcome, e.state
		FROM ff_completion_event c JOIN ff_execution e ON e.partition_key = c.partition_key AND e.execution_id = c.execution_id
		JOIN unnest($1::text[], $2::text[]) AS m(state, outcome) ON m.state = e.state
		WHERE c.outcome <> m.outcome`, true},
	{"every terminal flow has exactly one flow event, and an open one none", `
		SELECT f.flow_id::text, f.state, count(c.event_id)
		FROM ff_flow f
		LEFT JOIN ff_completion_event c ON c.partition_key = f.partition_key AND c.flow_id = f.flow_id AND c.execution_id IS NULL
		GROUP BY f.partition_key, f.flow_id, f.state
		HAVING count(c.event_id) <> CASE WHEN f.state = 'open' THEN 0 ELSE 1 END`, false},
	{"every group's counters equal its edges by state and outcome", `
		SELECT g.downstream_id::text, g.total, g.success_count, g.fail_count, g.skip_count,
			count(e.edge_id) FILTER (WHERE e.state IN ('applied', 'resolved')),
			count(e.edge_id) FILTER (WHERE e.resolved_outcome = 'success'),
			count(e.edge_id) FILTER (WHERE e.resolved_outcome IN ('failed', 'cancelled', 'expired')),
			count(e.edge_id) FILTER (WHERE e.resolved_outcome = 'skipped')
		FROM ff_edge_group g
		LEFT JOIN ff_edge e ON e.partition_key = g.partition_key AND e.flow_id = g.flow_id AND e.downstream_id = g.downstream_id
		GROUP BY g.partition_key, g.flow_id, g.downstream_id, g.total, g.success_count, g.fail_count, g.skip_count
		HAVING g.total <> count(e.edge_id) FILTER (WHERE e.state IN ('applied', 'resolved'))
			OR g.success_count <> count(e.edge_id) FILTER (WHERE e.resolved_outcome = 'success')
			OR g.fail_count <> count(e.edge_id) FILTER (WHERE e.resolved_outcome IN ('failed', 'cancelled', 'expired'))
			OR g.skip_count <> count(e.edge_id) FILTER (WHERE e.resolved_outcome = 'skipped')`, false},
	{"every resolved edge matches its upstream's outcome", `
		SELECT e.edge_id::text, e.resolved_outcome, u.state
		FROM ff_edge e JOIN ff_execution u ON u.partition_key = e.partition_key AND u.execution_id = e.upstream_id
		JOIN unnest($1::text[], $2::text[]) AS m(state, outcome) ON m.state = u.state
		WHERE e.state = 'resolved' AND e.resolved_outcome <> m.outcome`, true},
	{"a satisfied group's downstream is no longer blocked and was not skipped", `
		SELECT g.downstream_id::text, x.state
		FROM ff_edge_group g JOIN ff_execution x ON x.partition_key = g.partition_key AND x.execution_id = g.downstream_id
		WHERE g.decision = 'satisfied' AND x.state IN ('blocked', 'skipped')`, false},
	{"an impossible group's downstream never ran on", `
		SELECT g.downstream_id::text, x.state
		FROM ff_edge_group g JOIN ff_execution x ON x.partition_key = g.partition_key AND x.execution_id = g.downstream_id
		WHERE g.decision = 'impossible' AND x.state NOT IN ('skipped', 'cancelled', 'expired')`, false},
	{"no blocked execution has a decided group", `
		SELECT x.execution_id::text, g.decision
		FROM ff_execution x JOIN ff_edge_group g ON g.partition_key = x.partition_key AND g.downstream_id = x.execution_id
		WHERE x.state = 'blocked' AND g.decision <> 'pending'`, false},
	{"a group decides exactly when its policy says", `
		SELECT g.downstream_id::text, g.policy, g.decision, g.total, g.success_count, g.fail_count, g.skip_count
		FROM ff_edge_group g
		WHERE g.decision = 'pending' AND g.total > 0 AND (
			(g.policy = 'all_of' AND (g.success_count = g.total OR g.fail_count + g.skip_count > 0))
			OR (g.policy = 'any_of' AND (g.success_count >= 1 OR g.fail_count + g.skip_count = g.total))
			OR (g.policy = 'quorum' AND (g.success_count >= g.k OR g.total - g.fail_count - g.skip_count < g.k)))`, false},
	{"a running execution holds its attempt on its row, at its epoch", `
		SELECT x.execution_id::text, x.state, x.attempt_worker, x.lease_owner
		FROM ff_execution x
		WHERE x.state = 'running' AND (x.attempt_started_at IS NULL OR x.attempt_worker IS DISTINCT FROM x.lease_owner)`, false},
	{"every attempt is a row or held on the execution, exactly once, each ended but the running one", `
		SELECT x.execution_id::text, x.state, x.attempt, count(a.attempt), x.attempt_started_at IS NOT NULL
		FROM ff_execution x
		LEFT JOIN ff_attempt a ON a.partition_key = x.partition_key AND a.execution_id = x.execution_id
		GROUP BY x.partition_key, x.execution_id, x.state, x.attempt, x.attempt_started_at
		HAVING count(a.attempt) + CASE WHEN x.attempt_started_at IS NOT NULL THEN 1 ELSE 0 END <> x.attempt
			OR count(a.attempt) FILTER (WHERE a.outcome IS NULL) > 0
			OR max(a.attempt) >= x.attempt AND x.attempt_started_at IS NOT NULL`, false},
	{"an execution's waits are its attempts that ended in a wait, and a current wait is pending or over", `
		SELECT x.execution_id::text, x.state, coalesce(w.waits, 0), count(a.attempt)
		FROM ff_execution x
		LEFT JOIN ff_wait w ON w.partition_key = x.partition_key AND w.execution_id = x.execution_id
		LEFT JOIN ff_attempt a ON a.partition_key = x.partition_key AND a.execution_id = x.execution_id AND a.outcome = 'waited'
		GROUP BY x.partition_key, x.execution_id, x.state, x.attempt, w.waits, w.wait_attempt
		HAVING count(a.attempt) <> coalesce(w.waits, 0)
			OR w.wait_attempt > x.attempt
			OR (w.wait_attempt = x.attempt AND x.state IN ('blocked', 'running', 'completed', 'failed'))`, false},
	{"every wait and every spawned step belongs to an execution", `
		SELECT 'wait', w.execution_id::text FROM ff_wait w
		WHERE NOT EXISTS (SELECT 1 FROM ff_execution x WHERE x.partition_key = w.partition_key AND x.execution_id = w.execution_id)
		UNION ALL
		SELECT 'spawned', s.execution_id::text FROM ff_spawned s
		WHERE NOT EXISTS (SELECT 1 FROM ff_execution x WHERE x.partition_key = s.partition_key AND x.execution_id = s.execution_id
			AND x.flow_id = s.flow_id)`, false},
	{"a consumed signal was taken by an execution that waited", `
		SELECT s.signal_id::text, s.name, x.execution_id::text
		FROM ff_signal s
		LEFT JOIN ff_attempt a ON a.partition_key = s.partition_key AND a.execution_id = s.consumed_by AND a.outcome = 'waited'
		LEFT JOIN ff_execution x ON x.partition_key = s.partition_key AND x.execution_id = s.consumed_by
		WHERE s.consumed_by IS NOT NULL
		GROUP BY s.signal_id, s.name, x.execution_id
		HAVING count(a.attempt) = 0 AND x.execution_id IS NOT NULL`, false},
	{"a flow counts its members and edges", `
		SELECT f.flow_id::text, f.node_count, f.edge_count,
			(SELECT count(*) FROM ff_execution x WHERE x.partition_key = f.partition_key AND x.flow_id = f.flow_id),
			(SELECT count(*) FROM ff_edge e WHERE e.partition_key = f.partition_key AND e.flow_id = f.flow_id)
		FROM ff_flow f
		WHERE f.node_count <> (SELECT count(*) FROM ff_execution x WHERE x.partition_key = f.partition_key AND x.flow_id = f.flow_id)
			OR f.edge_count <> (SELECT count(*) FROM ff_edge e WHERE e.partition_key = f.partition_key AND e.flow_id = f.flow_id)`, false},
	{"a lane has a room exactly while it is capped or rate-limited", `
		SELECT l.lane, 'no room' FROM ff_lane l
		WHERE (l.max_running IS NOT NULL OR l.rate_count IS NOT NULL)
			AND NOT EXISTS (SELECT 1 FROM ff_lane_room r WHERE r.lane = l.lane)
		UNION ALL
		SELECT r.lane, 'a room of a lane neither capped nor rate-limited' FROM ff_lane_room r
		WHERE NOT EXISTS (SELECT 1 FROM ff_lane l WHERE l.lane = r.lane
			AND (l.max_running IS NOT NULL OR l.rate_count IS NOT NULL))`, false},
}

// quiescent holds once every event has been dispatched and every cancel
// group drained.
var quiescent = []check{
	{"no undispatched completion event", `SELECT event_id::text FROM ff_completion_event WHERE dispatched_at IS NULL`, false},
	{"no pending cancel group", `SELECT downstream_id::text FROM ff_pending_cancel_group`, false},
	{"no applied edge from a finished upstream", `
		SELECT e.edge_id::text, u.state
		FROM ff_edge e JOIN ff_execution u ON u.partition_key = e.partition_key AND u.execution_id = e.upstream_id
		WHERE e.state = 'applied' AND u.state IN ('completed', 'failed', 'cancelled', 'skipped', 'expired')`, false},
	{"a satisfied cancel_remaining group has no live sibling", `
		SELECT g.downstream_id::text, u.execution_id::text, u.state
		FROM ff_edge_group g
		JOIN ff_edge e ON e.partition_key = g.partition_key AND e.flow_id = g.flow_id AND e.downstream_id = g.downstream_id
		JOIN ff_execution u ON u.partition_key = e.partition_key AND u.execution_id = e.upstream_id
		WHERE g.decision = 'satisfied' AND g.on_satisfied = 'cancel_remaining'
			AND u.state IN ('blocked', 'pending', 'running')
			AND u.created_at < g.decided_at`, false},
	{"a flow whose members are all terminal is not open", `
		SELECT f.flow_id::text FROM ff_flow f
		WHERE f.state = 'open' AND f.node_count > 0 AND NOT EXISTS (
			SELECT 1 FROM ff_execution x WHERE x.partition_key = f.partition_key AND x.flow_id = f.flow_id
				AND x.state IN ('blocked', 'pending', 'running'))`, false},
}

// CheckInvariants runs the invariants that hold at every commit.
func CheckInvariants(ctx context.Context, db DB) error {
	return run(ctx, db, always)
}

// CheckQuiescent runs CheckInvariants and the invariants that hold once the cascade
// has caught up (no event left to dispatch, no cancel group left).
func CheckQuiescent(ctx context.Context, db DB) error {
	return errors.Join(run(ctx, db, always), run(ctx, db, quiescent))
}

func run(ctx context.Context, db DB, checks []check) error {
	var states, outcomes []string
	for _, st := range ffdtype.States {
		if st.Terminal() {
			states, outcomes = append(states, string(st)), append(outcomes, string(ffdtype.OutcomeOf(st)))
		}
	}
	var errs []error
	for _, c := range checks {
		var args []any
		if c.outcomes {
			args = []any{states, outcomes}
		}
		rows, err := db.Query(ctx, c.sql, args...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
			continue
		}
		var bad []string
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				errs = append(errs, err)
				break
			}
			if len(bad) < 5 {
				bad = append(bad, fmt.Sprint(vals))
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.name, err))
		}
		if len(bad) > 0 {
			errs = append(errs, fmt.Errorf("violated: %s: %v", c.name, bad))
		}
	}
	return errors.Join(errs...)
}
