package store

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// FlowEventCounts counts a flow's outbox rows: its steps' completion
// events by outcome (not the flow's own event, whose outcome is the flow's
// state) and its steps' lease events by type.
func FlowEventCounts(ctx context.Context, db DB, flowID uuid.UUID) (completions map[ffdtype.Outcome]int, leases map[LeaseEventType]int, err error) {
	completions, err = countBy[ffdtype.Outcome](ctx, db, `SELECT outcome, count(*) FROM ff_completion_event
		WHERE flow_id = $1 AND execution_id IS NOT NULL GROUP BY outcome`, flowID)
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

// LaneDepth is how many live executions of a lane are in one state, and
// of those how many are waiting on time rather than on a worker: pending
// but not yet due (a retry's backoff, a delay), or running on a lease
// that has lapsed (left to the daemon's expiry).
type LaneDepth struct {
	Lane    string        `db:"lane"`
	State   ffdtype.State `db:"state"`
	Count   int64         `db:"count"`
	Waiting int64         `db:"waiting"`
}

// String is the depth as a drain's progress line names it.
func (d LaneDepth) String() string {
	s := fmt.Sprintf("%s %s %d", d.Lane, d.State, d.Count)
	switch {
	case d.Waiting == 0:
	case d.State == ffdtype.StatePending:
		s += fmt.Sprintf(" (%d not yet due)", d.Waiting)
	case d.State == ffdtype.StateRunning:
		s += fmt.Sprintf(" (%d on lapsed leases)", d.Waiting)
	}
	return s
}

// LiveByLane counts the live executions (blocked, pending, running) of
// every lane by state.
func LiveByLane(ctx context.Context, db DB) ([]LaneDepth, error) {
	rows, err := db.Query(ctx, `SELECT lane, state, count(*) AS count,
			count(*) FILTER (WHERE state = 'pending' AND run_at > now()
				OR state = 'running' AND lease_expires_at <= now()) AS waiting
		FROM ff_execution
		WHERE state IN ('blocked', 'pending', 'running') GROUP BY lane, state ORDER BY lane, state`)
	if err != nil {
		return nil, wrap("count live executions by lane", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[LaneDepth])
	return out, wrap("count live executions by lane", err)
}

// Outstanding is the work left anywhere in the engine; all zero once a
// workload has drained.
type Outstanding struct {
	Live         int `db:"live"`         // executions blocked, pending or running
	Undispatched int `db:"undispatched"` // completion events not yet dispatched
	CancelGroups int `db:"cancel_groups"`
	OpenFlows    int `db:"open_flows"`
	// Links: sub-flows not yet ended, failed or cancelled flows whose
	// compensations have not started, events not yet fired.
	Links int `db:"links"`
}

// ReadOutstanding counts the work left.
func ReadOutstanding(ctx context.Context, db DB) (Outstanding, error) {
	rows, err := db.Query(ctx, `SELECT
		(SELECT count(*) FROM ff_execution WHERE state IN ('blocked', 'pending', 'running')) AS live,
		(SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL) AS undispatched,
		(SELECT count(*) FROM ff_pending_cancel_group) AS cancel_groups,
		(SELECT count(*) FROM ff_flow WHERE state = 'open') AS open_flows,
		(SELECT count(*) FROM ff_subflow WHERE ended_at IS NULL)
			+ (SELECT count(*) FROM ff_flow WHERE compensation = 'armed' AND state <> 'open')
			+ (SELECT count(*) FROM ff_event WHERE fired_at IS NULL) AS links`)
	if err != nil {
		return Outstanding{}, wrap("count outstanding work", err)
	}
	o, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Outstanding])
	return o, wrap("count outstanding work", err)
}

// EventCounts counts the rows of both outboxes.
func EventCounts(ctx context.Context, db DB) (completion, lease int64, err error) {
	err = db.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_completion_event), (SELECT count(*) FROM ff_lease_event)`).
		Scan(&completion, &lease)
	return completion, lease, wrap("count outbox events", err)
}

// CompletionsBetween counts the completion events that occurred between
// from and to (their own times, the database's clock).
func CompletionsBetween(ctx context.Context, db DB, from, to time.Time) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `SELECT count(*) FROM ff_completion_event WHERE occurred_at BETWEEN $1 AND $2`, from, to).Scan(&n)
	return n, wrap("count completion events between two times", err)
}

// FirstCompletionAfter returns the time of the first completion event
// that occurred from from on (its own time, the database's clock); false
// when there is none.
func FirstCompletionAfter(ctx context.Context, db DB, from time.Time) (time.Time, bool, error) {
	var at *time.Time
	err := db.QueryRow(ctx, `SELECT min(occurred_at) FROM ff_completion_event WHERE occurred_at >= $1`, from).Scan(&at)
	if err != nil || at == nil {
		return time.Time{}, false, wrap("read the first completion event after a time", err)
	}
	return *at, true, nil
}

// EventIDs returns the id of every event of both outboxes.
func EventIDs(ctx context.Context, db DB) (completion, lease []int64, err error) {
	rows, err := db.Query(ctx, `SELECT 'completion', event_id FROM ff_completion_event
		UNION ALL SELECT 'lease', event_id FROM ff_lease_event`)
	if err != nil {
		return nil, nil, wrap("read event ids", err)
	}
	var stream ffdtype.OutboxStream
	var id int64
	_, err = pgx.ForEachRow(rows, []any{&stream, &id}, func() error {
		if stream == ffdtype.StreamCompletion {
			completion = append(completion, id)
		} else {
			lease = append(lease, id)
		}
		return nil
	})
	return completion, lease, wrap("read event ids", err)
}

// MemberState is a flow member's kind and state.
type MemberState struct {
	FlowID string        `db:"flow_id"`
	Kind   string        `db:"kind"`
	State  ffdtype.State `db:"state"`
}

// FlowMemberStates returns the kind and state of every flow member.
func FlowMemberStates(ctx context.Context, db DB) ([]MemberState, error) {
	rows, err := db.Query(ctx, `SELECT flow_id::text AS flow_id, kind, state FROM ff_execution WHERE flow_id IS NOT NULL`)
	if err != nil {
		return nil, wrap("read flow members", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[MemberState])
	return out, wrap("read flow members", err)
}

// CompensationFlows counts the compensation flows of a flow.
func CompensationFlows(ctx context.Context, db DB, flowID uuid.UUID) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM ff_flow WHERE partition_key = $1 AND compensation_of = $2`,
		ident.Partition(flowID), flowID).Scan(&n)
	return n, wrap("count the compensation flows of flow "+flowID.String(), err)
}

// FlowAttemptWorkers lists the worker of every attempt of every member of
// a flow.
func FlowAttemptWorkers(ctx context.Context, db DB, flowID uuid.UUID) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT a.worker FROM ff_attempt_all a
		JOIN ff_execution x ON x.partition_key = a.partition_key AND x.execution_id = a.execution_id
		WHERE x.partition_key = $1 AND x.flow_id = $2`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, wrap("read the attempts of flow "+flowID.String(), err)
	}
	ws, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return ws, wrap("read the attempts of flow "+flowID.String(), err)
}

// EventState is how a published event stands.
type EventState struct {
	Key     string
	ID      uuid.UUID
	Fired   bool
	Started int
}

// EventsNamed lists the events published under name, in any namespace.
func EventsNamed(ctx context.Context, db DB, name string) ([]EventState, error) {
	rows, err := db.Query(ctx, `SELECT event_key, event_id, fired_at IS NOT NULL, started FROM ff_event WHERE name = $1`, name)
	if err != nil {
		return nil, wrap("read the events named "+name, err)
	}
	es, err := pgx.CollectRows(rows, pgx.RowToStructByPos[EventState])
	return es, wrap("read the events named "+name, err)
}

// FlowsOfKind counts the flows of a kind.
func FlowsOfKind(ctx context.Context, db DB, kind string) (int, error) {
	var n int
	err := db.QueryRow(ctx, `SELECT count(*) FROM ff_flow WHERE kind = $1`, kind).Scan(&n)
	return n, wrap("count the flows of kind "+kind, err)
}
