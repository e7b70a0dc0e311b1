package store

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// policyColumns are the policy's nullable columns: k for a quorum only,
// on_satisfied for any_of and quorum only.
func policyColumns(p ffdtype.Policy) (k *int, onSatisfied *string) {
	if p.Kind == ffdtype.Quorum {
		kk := p.K
		k = &kk
	}
	if p.Kind != ffdtype.AllOf {
		s := string(p.OnSatisfied)
		onSatisfied = &s
	}
	return k, onSatisfied
}

// groupColumns is the select list of an EdgeGroup, for a row aliased g.
const groupColumns = `g.partition_key, g.flow_id, g.downstream_id, g.policy, g.k, g.on_satisfied,
	g.total, g.success_count, g.fail_count, g.skip_count, g.decision, g.decided_at, g.cancel_members`

// groupRow is one row of groupColumns, scanned by name.
type groupRow struct {
	PartitionKey  int16              `db:"partition_key"`
	FlowID        uuid.UUID          `db:"flow_id"`
	DownstreamID  uuid.UUID          `db:"downstream_id"`
	Policy        ffdtype.PolicyKind `db:"policy"`
	K             *int               `db:"k"`
	OnSatisfied   *string            `db:"on_satisfied"`
	Total         int                `db:"total"`
	SuccessCount  int                `db:"success_count"`
	FailCount     int                `db:"fail_count"`
	SkipCount     int                `db:"skip_count"`
	Decision      ffdtype.Decision   `db:"decision"`
	DecidedAt     *time.Time         `db:"decided_at"`
	CancelMembers []uuid.UUID        `db:"cancel_members"`
}

func scanGroup(row pgx.CollectableRow) (*ffdtype.EdgeGroup, error) {
	r, err := pgx.RowToAddrOfStructByName[groupRow](row)
	if err != nil {
		return nil, err
	}
	return r.group()
}

func (r *groupRow) group() (*ffdtype.EdgeGroup, error) {
	g := &ffdtype.EdgeGroup{
		FlowID:        r.FlowID,
		Downstream:    ffdtype.ExecutionID{Partition: r.PartitionKey, UUID: r.DownstreamID},
		Policy:        ffdtype.Policy{Kind: r.Policy, OnSatisfied: ffdtype.OnSatisfied(deref(r.OnSatisfied))},
		Counts:        ffdtype.Counts{Total: r.Total, Success: r.SuccessCount, Fail: r.FailCount, Skip: r.SkipCount},
		Decision:      r.Decision,
		DecidedAt:     r.DecidedAt,
		CancelMembers: idsOn(r.PartitionKey, r.CancelMembers),
	}
	if r.K != nil {
		g.Policy.K = *r.K
	}
	return g, nil
}

func oneGroup(rows pgx.Rows, err error) (*ffdtype.EdgeGroup, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectExactlyOneRow(rows, scanGroup)
}

// GetGroup reads one edge group, or returns pgx.ErrNoRows.
func GetGroup(ctx context.Context, db DB, flowID uuid.UUID, down ffdtype.ExecutionID) (*ffdtype.EdgeGroup, error) {
	return oneGroup(db.Query(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
		WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = $3`, ident.Partition(flowID), flowID, down.UUID))
}

// ListGroups reads every edge group of a flow, by downstream id.
func ListGroups(ctx context.Context, db DB, flowID uuid.UUID) ([]ffdtype.EdgeGroup, error) {
	rows, err := db.Query(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
		WHERE g.partition_key = $1 AND g.flow_id = $2 ORDER BY g.downstream_id`, ident.Partition(flowID), flowID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ffdtype.EdgeGroup, error) {
		g, err := scanGroup(r)
		if err != nil {
			return ffdtype.EdgeGroup{}, err
		}
		return *g, nil
	})
}

// NewGroup is the edge group of a submitted flow's downstream: its policy
// and its number of (already applied) incoming edges.
type NewGroup struct {
	Downstream ffdtype.ExecutionID
	Policy     ffdtype.Policy
	Total      int
}

// InsertGroups inserts a submitted flow's edge groups in one statement.
func InsertGroups(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, gs []NewGroup) error {
	n := len(gs)
	downs, kinds, ks, ons, totals := make([]pgtype.UUID, n), make([]string, n), make([]*int, n), make([]*string, n), make([]int, n)
	for i, g := range gs {
		downs[i], kinds[i], totals[i] = pgUUID(g.Downstream.UUID), string(g.Policy.Kind), g.Total
		ks[i], ons[i] = policyColumns(g.Policy)
	}
	_, err := tx.Exec(ctx, insertGroupsSQL, ident.Partition(flowID), flowID, downs, kinds, ks, ons, totals)
	return err
}

// SetGroupPolicy replaces the policy of a group the caller holds locked.
func SetGroupPolicy(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, down ffdtype.ExecutionID, p ffdtype.Policy) error {
	k, on := policyColumns(p)
	_, err := tx.Exec(ctx, `UPDATE ff_edge_group SET policy = $4, k = $5, on_satisfied = $6
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`,
		ident.Partition(flowID), flowID, down.UUID, string(p.Kind), k, on)
	return err
}

// Resolution is an upstream's terminal outcome to resolve its applied
// outgoing edges from.
type Resolution struct {
	Upstream ffdtype.ExecutionID
	Outcome  ffdtype.Outcome
	EdgeID   *uuid.UUID // only this edge (apply); nil: every applied edge
}

func resolutionArrays(rs []Resolution) (parts []int16, ups []pgtype.UUID, outcomes []string, edges []pgtype.UUID) {
	n := len(rs)
	parts, ups, outcomes, edges = make([]int16, n), make([]pgtype.UUID, n), make([]string, n), make([]pgtype.UUID, n)
	for i, r := range rs {
		parts[i], ups[i], outcomes[i], edges[i] = r.Upstream.Partition, pgUUID(r.Upstream.UUID), string(r.Outcome), pgUUIDOrNull(r.EdgeID)
	}
	return parts, ups, outcomes, edges
}

// Moved is a group whose counters a ResolveEdges moved: its state after the
// move, and how many of its edges resolved, by outcome class.
type Moved struct {
	Group                    ffdtype.EdgeGroup
	Resolved                 int
	Success, Failed, Skipped int
	Lane                     string // the downstream's
}

// collectMoved reads resolveSQL's rows: each group a resolve touched.
func collectMoved(rows pgx.Rows) ([]Moved, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Moved, error) {
		r, err := pgx.RowToAddrOfStructByName[movedRow](row)
		if err != nil {
			return Moved{}, err
		}
		g, err := r.groupRow.group()
		return Moved{Group: *g, Resolved: r.Resolved, Success: r.Success, Failed: r.Failed, Skipped: r.Skipped, Lane: r.Lane}, err
	})
}

// movedRow is one row of resolveSQL's result, scanned by name.
type movedRow struct {
	groupRow
	Resolved int    `db:"resolved"`
	Success  int    `db:"resolved_success"`
	Failed   int    `db:"resolved_failed"`
	Skipped  int    `db:"resolved_skipped"`
	Lane     string `db:"downstream_lane"`
}

// resolveSQL resolves the applied edges of the input upstreams and adds the
// resolutions to their groups' counters, returning each touched group with
// its new counters and how many of its edges resolved, by class, and its
// downstream's lane (read by primary key, not locked: an execution's lane
// never changes), for the notice a downstream made pending owes. Only
// edges still 'applied' are touched, each under its row lock, so an edge
// resolves exactly once however many callers race; the caller holds the
// groups (Locks.ResolveEdges).
var (
	resolveSQL       = resolveStatement(false)
	resolveRoutedSQL = resolveStatement(true)
)

// resolveStatement is resolveSQL, narrowed to the partitions $5 (of one
// shard) when routed.
func resolveStatement(routed bool) string {
	one := narrowTo(routed, "ANY($5::smallint[])")
	return `
WITH input AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::text[], $4::uuid[])
		AS i(partition_key, upstream_id, outcome, edge_id)
), res AS (
	UPDATE ff_edge e SET state = 'resolved', resolved_outcome = i.outcome, resolved_at = now()
	FROM input i
	WHERE e.partition_key = i.partition_key AND e.upstream_id = i.upstream_id AND e.state = 'applied'
		AND (i.edge_id IS NULL OR e.edge_id = i.edge_id)` + one("e") + `
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
FROM agg a, ff_execution x
WHERE g.partition_key = a.partition_key AND g.flow_id = a.flow_id AND g.downstream_id = a.downstream_id
	AND x.partition_key = a.partition_key AND x.execution_id = a.downstream_id` + one("g") + one("x") + `
RETURNING ` + groupColumns + `,
	a.n::int AS resolved, a.s::int AS resolved_success, a.f::int AS resolved_failed, a.k::int AS resolved_skipped,
	x.lane AS downstream_lane`
}

// DecisionEffects are the effects of the groups that decided in one resolve:
// every decision recorded, the satisfied downstreams made pending, and the
// satisfied cancel_remaining groups queued for sibling cancellation.
// Impossible downstreams are skipped through Terminate, separately.
type DecisionEffects struct {
	Decided []ffdtype.EdgeGroup   // with their new Decision
	Ready   []ffdtype.ExecutionID // blocked downstreams to make pending
	Lanes   []string              // the lanes of Ready, whose workers are told
	Cancel  []ffdtype.EdgeGroup   // satisfied cancel_remaining groups
	// Unflushed lets the caller's transaction commit without waiting for
	// its WAL to reach the disk (synchronous_commit off, for this
	// transaction only), on one Postgres. Only a transaction whose every
	// write a crash may take back sets it: one whose writes are re-made
	// from a row that was durable before it (a dispatch: its completion
	// event is still undispatched after such a crash, and the cascade
	// dispatches it again), that writes no outbox row a consumer could
	// read, and whose effects nothing acts on without a commit of its
	// own (a claim of a downstream it made pending commits synchronously,
	// which flushes the WAL before it, the dispatch's included). A
	// distributed Postgres keeps synchronous commits: a transaction's
	// parts on several nodes must not be lost apart.
	Unflushed bool
}

// RecordDecisions makes the decisions take effect in one round trip: the
// statements go as one pipelined batch, in lock order, inside the caller's
// transaction, with the notice that tells the lanes of Ready's
// downstreams (sent when the dispatch commits). It returns how many groups
// were queued for sibling cancellation (a group with no live sibling needs
// none).
func RecordDecisions(ctx context.Context, tx pgx.Tx, d DecisionEffects) (queued int, err error) {
	all := make([]int16, len(d.Decided))
	for i, g := range d.Decided {
		all[i] = g.Downstream.Partition // Ready and Cancel are among them
	}
	routed, one, err := routedPartitions(ctx, tx, all)
	if err != nil {
		return 0, err
	}
	stmts := recordSQL[routed]
	b := &pgx.Batch{}
	if n := len(d.Decided); n > 0 {
		parts, flows, downs, decisions := make([]int16, n), make([]pgtype.UUID, n), make([]pgtype.UUID, n), make([]string, n)
		for i, g := range d.Decided {
			parts[i], flows[i], downs[i], decisions[i] = g.Downstream.Partition, pgUUID(g.FlowID), pgUUID(g.Downstream.UUID), string(g.Decision)
		}
		b.Queue(stmts.decide, routedArgs(routed, one, parts, flows, downs, decisions)...)
	}
	if n := len(d.Ready); n > 0 {
		parts, ids := make([]int16, n), make([]pgtype.UUID, n)
		for i, id := range d.Ready {
			parts[i], ids[i] = id.Partition, pgUUID(id.UUID)
		}
		b.Queue(stmts.ready, routedArgs(routed, one, parts, ids)...)
		ready := &Notices{}
		for _, lane := range d.Lanes {
			ready.Ready(lane)
		}
		ready.Queue(b)
	}
	if n := len(d.Cancel); n > 0 {
		parts, flows, downs := make([]int16, n), make([]pgtype.UUID, n), make([]pgtype.UUID, n)
		for i, g := range d.Cancel {
			parts[i], flows[i], downs[i] = g.Downstream.Partition, pgUUID(g.FlowID), pgUUID(g.Downstream.UUID)
		}
		b.Queue(stmts.queueCancel, routedArgs(routed, one, parts, flows, downs)...).Exec(func(tag pgconn.CommandTag) error {
			queued = int(tag.RowsAffected())
			return nil
		})
	}
	if b.Len() == 0 {
		return 0, nil
	}
	if d.Unflushed && !routed {
		b.Queue(`SELECT set_config('synchronous_commit', 'off', true)`)
	}
	return queued, tx.SendBatch(ctx, b).Close()
}

// recordSQL are RecordDecisions' statements, plain (false) and narrowed
// to the partitions of one shard (true: its last parameter).
var recordSQL = map[bool]recordStatements{false: newRecordStatements(false), true: newRecordStatements(true)}

type recordStatements struct{ decide, ready, queueCancel string }

func newRecordStatements(routed bool) recordStatements {
	return recordStatements{
		decide: `UPDATE ff_edge_group g SET decision = i.decision, decided_at = now()
			FROM unnest($1::smallint[], $2::uuid[], $3::uuid[], $4::text[]) AS i(partition_key, flow_id, downstream_id, decision)
			WHERE g.partition_key = i.partition_key AND g.flow_id = i.flow_id AND g.downstream_id = i.downstream_id` + narrowTo(routed, "ANY($5::smallint[])")("g"),
		ready: `UPDATE ff_execution e SET state = 'pending', run_at = now()
			FROM unnest($1::smallint[], $2::uuid[]) AS i(partition_key, execution_id)
			WHERE e.partition_key = i.partition_key AND e.execution_id = i.execution_id AND e.state = 'blocked'` + narrowTo(routed, "ANY($3::smallint[])")("e"),
		queueCancel: queueCancelStatement(routed),
	}
}

// queueCancelStatement records, for each satisfied cancel_remaining
// group, the sibling upstreams still live, and queues the group for the
// sibling-cancel workers; a group with no live sibling needs no queueing.
// Narrowed to the partitions $4 (of one shard) when routed.
func queueCancelStatement(routed bool) string {
	one := narrowTo(routed, "ANY($4::smallint[])")
	return `
WITH g AS (
	SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::uuid[]) AS i(partition_key, flow_id, downstream_id)
), live AS (
	SELECT e.partition_key, e.flow_id, e.downstream_id, array_agg(e.upstream_id ORDER BY e.upstream_id) AS members
	FROM ff_edge e
	JOIN g ON e.partition_key = g.partition_key AND e.flow_id = g.flow_id AND e.downstream_id = g.downstream_id
	JOIN ff_execution x ON x.partition_key = e.partition_key AND x.execution_id = e.upstream_id
	WHERE x.state IN ('blocked', 'pending', 'running')` + one("e") + one("x") + `
	GROUP BY e.partition_key, e.flow_id, e.downstream_id
), rec AS (
	UPDATE ff_edge_group eg SET cancel_members = live.members
	FROM live
	WHERE eg.partition_key = live.partition_key AND eg.flow_id = live.flow_id AND eg.downstream_id = live.downstream_id` + one("eg") + `
	RETURNING eg.partition_key, eg.flow_id, eg.downstream_id
)
INSERT INTO ff_pending_cancel_group (partition_key, flow_id, downstream_id)
SELECT partition_key, flow_id, downstream_id FROM rec
ON CONFLICT DO NOTHING`
}

// TakeCancelGroup locks the oldest queued sibling-cancel group that no
// other worker holds, or returns pgx.ErrNoRows. Queue rows come before
// every row of the lock order and are taken with SKIP LOCKED.
//
// The statement also sets the transaction's lock_timeout to lockTimeout
// (0: the session's), like TakeEvents, so that the group's siblings are
// waited for at most that long.
func TakeCancelGroup(ctx context.Context, tx pgx.Tx, lockTimeout time.Duration) (flowID uuid.UUID, down ffdtype.ExecutionID, err error) {
	dist, err := Distributed(ctx, tx)
	if err != nil {
		return flowID, down, err
	}
	if dist {
		return takeCancelGroupRouted(ctx, tx, lockTimeout)
	}
	err = tx.QueryRow(ctx, `WITH wait AS (`+setLockTimeout("$1")+`)
		SELECT g.partition_key, g.flow_id, g.downstream_id FROM ff_pending_cancel_group g, wait
		ORDER BY g.enqueued_at LIMIT 1 FOR UPDATE OF g SKIP LOCKED`, millisOrNull(lockTimeout)).Scan(&down.Partition, &flowID, &down.UUID)
	return flowID, down, err
}

// cancelGroupCandidates bounds how many queued groups a routed take reads
// before locking the first it can.
const cancelGroupCandidates = 16

// takeCancelGroupRouted is TakeCancelGroup on a distributed Postgres: the
// oldest queued groups are read without locks (a read may span every
// shard), then locked one by one by key (one shard each) until one is
// free. The lock timeout goes to the nodes' connections too
// (queueRoutedLockTimeout).
func takeCancelGroupRouted(ctx context.Context, tx pgx.Tx, lockTimeout time.Duration) (flowID uuid.UUID, down ffdtype.ExecutionID, err error) {
	if ms := millisOrNull(lockTimeout); ms != nil {
		b := &pgx.Batch{}
		queueRoutedLockTimeout(b, ms)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return flowID, down, err
		}
	}
	rows, err := tx.Query(ctx, `SELECT partition_key, flow_id, downstream_id FROM ff_pending_cancel_group
		ORDER BY enqueued_at LIMIT $1`, cancelGroupCandidates)
	if err != nil {
		return flowID, down, err
	}
	type key struct {
		part       int16
		flow, down uuid.UUID
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (key, error) {
		var k key
		return k, r.Scan(&k.part, &k.flow, &k.down)
	})
	if err != nil {
		return flowID, down, err
	}
	for _, k := range keys {
		err = tx.QueryRow(ctx, `SELECT partition_key, flow_id, downstream_id FROM ff_pending_cancel_group
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3
			FOR UPDATE SKIP LOCKED`, k.part, k.flow, k.down).Scan(&down.Partition, &flowID, &down.UUID)
		if !errors.Is(err, pgx.ErrNoRows) {
			return flowID, down, err
		}
	}
	return flowID, down, pgx.ErrNoRows
}

// RequeueCancelGroup moves a pending cancel group to the back of the
// queue: its siblings are held by another transaction, and the groups
// behind it should not wait for them.
func RequeueCancelGroup(ctx context.Context, db DB, flowID uuid.UUID, down ffdtype.ExecutionID) error {
	_, err := db.Exec(ctx, `UPDATE ff_pending_cancel_group SET enqueued_at = now()
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`, down.Partition, flowID, down.UUID)
	return wrap("requeue cancel group "+down.String(), err)
}

// DoneCancelGroup clears a group's recorded siblings and removes it from
// the queue, in one statement, once its siblings are cancelled.
func DoneCancelGroup(ctx context.Context, tx pgx.Tx, flowID uuid.UUID, down ffdtype.ExecutionID) error {
	_, err := tx.Exec(ctx, `WITH g AS (
			UPDATE ff_edge_group SET cancel_members = '{}'
			WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3
		)
		DELETE FROM ff_pending_cancel_group
		WHERE partition_key = $1 AND flow_id = $2 AND downstream_id = $3`, down.Partition, flowID, down.UUID)
	return err
}

const insertGroupsSQL = `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, policy, k, on_satisfied, total)
		SELECT $1, $2, i.down, i.policy, i.k, i.on_satisfied, i.total
		FROM unnest($3::uuid[], $4::text[], $5::int[], $6::text[], $7::int[]) AS i(down, policy, k, on_satisfied, total)`
