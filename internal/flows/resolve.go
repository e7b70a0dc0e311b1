package flows

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Resolution is an upstream's terminal outcome to resolve its applied
// outgoing edges from.
type Resolution struct {
	Upstream ident.ExecutionID
	Outcome  string     // success, failed, cancelled, expired or skipped
	EdgeID   *uuid.UUID // only this edge (apply); nil: every applied edge
}

// Decided is a group that decided during a Resolve.
type Decided struct {
	FlowID     uuid.UUID
	Downstream ident.ExecutionID
	Decision   store.Decision
	Policy     Policy
}

// ResolveResult says what a Resolve did, for the caller's metrics.
type ResolveResult struct {
	EdgesResolved int
	ByOutcome     map[string]int
	Decided       []Decided
	CancelGroups  int                 // cancel_remaining groups queued for sibling cancellation
	Skipped       []store.Ended       // downstreams skipped (their completion events written)
	Readied       []ident.ExecutionID // downstreams made pending
}

// Resolve resolves the applied outgoing edges of the given upstreams from
// their outcomes, in the caller's transaction: edges become resolved, group
// counters move, undecided groups are evaluated (Evaluate), and decisions
// take effect — satisfied: the blocked downstream becomes pending (ff_ready
// fires at commit) and, under cancel_remaining, its live sibling upstreams
// are recorded and the group is queued for the sibling-cancel workers;
// impossible: the downstream is skipped through store.Terminate, which
// writes its completion event for the cascade to carry further.
//
// Only edges still 'applied' are touched and each is updated under its row
// lock, so an edge resolves exactly once however many callers race.
func Resolve(ctx context.Context, tx pgx.Tx, rs []Resolution) (*ResolveResult, error) {
	res := &ResolveResult{ByOutcome: map[string]int{}}
	if len(rs) == 0 {
		return res, nil
	}
	n := len(rs)
	parts, ups, outcomes, edges := make([]int16, n), make([]uuid.UUID, n), make([]string, n), make([]*uuid.UUID, n)
	for i, r := range rs {
		parts[i], ups[i], outcomes[i], edges[i] = r.Upstream.Partition, r.Upstream.UUID, r.Outcome, r.EdgeID
	}
	// Groups first, in downstream order: the global lock order.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM ff_edge_group g
		WHERE (g.partition_key, g.flow_id, g.downstream_id) IN (
			SELECT e.partition_key, e.flow_id, e.downstream_id
			FROM ff_edge e
			JOIN unnest($1::smallint[], $2::uuid[], $3::uuid[]) AS i(partition_key, upstream_id, edge_id)
				ON e.partition_key = i.partition_key AND e.upstream_id = i.upstream_id
			WHERE e.state = 'applied' AND (i.edge_id IS NULL OR e.edge_id = i.edge_id))
		ORDER BY g.partition_key, g.downstream_id
		FOR NO KEY UPDATE`, parts, ups, edges); err != nil {
		return nil, fmt.Errorf("lock edge groups: %w", err)
	}
	rows, err := tx.Query(ctx, resolveSQL, parts, ups, outcomes, edges)
	if err != nil {
		return nil, fmt.Errorf("resolve edges: %w", err)
	}
	type moved struct {
		part       int16
		flow, down uuid.UUID
		policy     Policy
		counts     Counts
		decision   store.Decision
	}
	var groups []moved
	for rows.Next() {
		var m moved
		var kind, onSat, decision string
		var nRes, nSucc, nFail, nSkip int
		if err := rows.Scan(&m.part, &m.flow, &m.down, &kind, &m.policy.K, &onSat, &m.counts.Total,
			&m.counts.Success, &m.counts.Fail, &m.counts.Skip, &decision, &nRes, &nSucc, &nFail, &nSkip); err != nil {
			rows.Close()
			return nil, fmt.Errorf("resolve edges: %w", err)
		}
		m.policy.Kind, m.policy.OnSatisfied, m.decision = store.PolicyKind(kind), store.OnSatisfied(onSat), store.Decision(decision)
		res.EdgesResolved += nRes
		res.ByOutcome["success"] += nSucc
		res.ByOutcome["failed"] += nFail
		res.ByOutcome["skipped"] += nSkip
		groups = append(groups, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("resolve edges: %w", err)
	}

	var decParts []int16
	var decFlows, decDowns []uuid.UUID
	var decisions []string
	var skip []store.Ending
	var ready, cancelParts []int16
	var readyIDs, cancelFlows, cancelDowns []uuid.UUID
	for _, g := range groups {
		if g.decision != store.Pending {
			continue // decided once; later resolutions only count
		}
		d := Evaluate(g.policy, g.counts)
		if d == store.Pending {
			continue
		}
		down := ident.ExecutionID{Partition: g.part, UUID: g.down}
		res.Decided = append(res.Decided, Decided{FlowID: g.flow, Downstream: down, Decision: d, Policy: g.policy})
		decParts, decFlows, decDowns, decisions = append(decParts, g.part), append(decFlows, g.flow), append(decDowns, g.down), append(decisions, string(d))
		if d == store.Impossible {
			skip = append(skip, store.Ending{ID: down, State: store.StateSkipped, Error: "dependencies can no longer be satisfied"})
			continue
		}
		ready, readyIDs = append(ready, g.part), append(readyIDs, g.down)
		res.Readied = append(res.Readied, down)
		if g.policy.OnSatisfied == store.CancelRemaining {
			cancelParts, cancelFlows, cancelDowns = append(cancelParts, g.part), append(cancelFlows, g.flow), append(cancelDowns, g.down)
		}
	}
	// The decisions take effect in one round trip: the statements go as a
	// pipelined batch, in this order, inside the caller's transaction.
	b := &pgx.Batch{}
	if len(decisions) > 0 {
		b.Queue(`UPDATE ff_edge_group g SET decision = i.decision, decided_at = now()
			FROM unnest($1::smallint[], $2::uuid[], $3::uuid[], $4::text[]) AS i(partition_key, flow_id, downstream_id, decision)
			WHERE g.partition_key = i.partition_key AND g.flow_id = i.flow_id AND g.downstream_id = i.downstream_id`,
			decParts, decFlows, decDowns, decisions)
	}
	if len(readyIDs) > 0 {
		b.Queue(`UPDATE ff_execution e SET state = 'pending', run_at = now()
			FROM unnest($1::smallint[], $2::uuid[]) AS i(partition_key, execution_id)
			WHERE e.partition_key = i.partition_key AND e.execution_id = i.execution_id AND e.state = 'blocked'`,
			ready, readyIDs)
	}
	if len(cancelDowns) > 0 {
		b.Queue(queueCancelSQL, cancelParts, cancelFlows, cancelDowns).Exec(func(tag pgconn.CommandTag) error {
			res.CancelGroups = int(tag.RowsAffected())
			return nil
		})
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return nil, fmt.Errorf("record decisions: %w", err)
		}
	}
	if len(skip) > 0 {
		ended, err := store.Terminate(ctx, tx, skip)
		if err != nil {
			return nil, err
		}
		res.Skipped = ended
	}
	return res, nil
}

// resolveSQL resolves the applied edges of the input upstreams and adds the
// resolutions to their groups' counters, returning each touched group with
// its new counters and how many of its edges resolved, by class.
const resolveSQL = `
WITH input AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::text[], $4::uuid[])
		AS i(partition_key, upstream_id, outcome, edge_id)
), res AS (
	UPDATE ff_edge e SET state = 'resolved', resolved_outcome = i.outcome, resolved_at = now()
	FROM input i
	WHERE e.partition_key = i.partition_key AND e.upstream_id = i.upstream_id AND e.state = 'applied'
		AND (i.edge_id IS NULL OR e.edge_id = i.edge_id)
	RETURNING e.partition_key, e.flow_id, e.downstream_id, e.resolved_outcome
), agg AS (
	SELECT partition_key, flow_id, downstream_id, count(*) AS n,
		count(*) FILTER (WHERE resolved_outcome = 'success') AS s,
		count(*) FILTER (WHERE resolved_outcome NOT IN ('success', 'skipped')) AS f,
		count(*) FILTER (WHERE resolved_outcome = 'skipped') AS k
	FROM res GROUP BY partition_key, flow_id, downstream_id
)
UPDATE ff_edge_group g SET
	success_count = g.success_count + a.s,
	fail_count = g.fail_count + a.f,
	skip_count = g.skip_count + a.k
FROM agg a
WHERE g.partition_key = a.partition_key AND g.flow_id = a.flow_id AND g.downstream_id = a.downstream_id
RETURNING g.partition_key, g.flow_id, g.downstream_id, g.policy, coalesce(g.k, 0), coalesce(g.on_satisfied, ''),
	g.total, g.success_count, g.fail_count, g.skip_count, g.decision, a.n, a.s, a.f, a.k`

// queueCancelSQL records, for each satisfied cancel_remaining group, the
// sibling upstreams still live, and queues the group for the sibling-cancel
// workers; a group with no live sibling needs no queueing.
const queueCancelSQL = `
WITH g AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::uuid[]) AS i(partition_key, flow_id, downstream_id)
), live AS (
	SELECT e.partition_key, e.flow_id, e.downstream_id, array_agg(e.upstream_id ORDER BY e.upstream_id) AS members
	FROM ff_edge e
	JOIN g ON e.partition_key = g.partition_key AND e.flow_id = g.flow_id AND e.downstream_id = g.downstream_id
	JOIN ff_execution x ON x.partition_key = e.partition_key AND x.execution_id = e.upstream_id
	WHERE x.state IN ('blocked', 'pending', 'running')
	GROUP BY e.partition_key, e.flow_id, e.downstream_id
), rec AS (
	UPDATE ff_edge_group eg SET cancel_members = live.members
	FROM live
	WHERE eg.partition_key = live.partition_key AND eg.flow_id = live.flow_id AND eg.downstream_id = live.downstream_id
	RETURNING eg.partition_key, eg.flow_id, eg.downstream_id
)
INSERT INTO ff_pending_cancel_group (partition_key, flow_id, downstream_id)
SELECT partition_key, flow_id, downstream_id FROM rec
ON CONFLICT DO NOTHING`
