package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
)

// rank is a table's place in the global lock order (docs/design.md
// section 9).
type rank int

const (
	rankNone rank = iota
	rankGroup
	rankEdge
	rankExecution
	rankFlow
)

var rankNames = [...]string{"nothing", "edge groups", "edges", "executions", "flows"}

// ErrLockOrder is a transaction asking for a row lock out of the global
// order. It is a bug in the caller, reported before any statement runs
// rather than left to surface as a deadlock under load.
var ErrLockOrder = errors.New("row lock out of the global order")

// Locks takes a transaction's explicit row locks in the global order:
// edge groups, then edges, then executions, then flows, and the rows of
// one table by key. Each method locks one table's rows in one statement;
// asking for a table earlier in the order than one already locked fails
// with ErrLockOrder. Locking rows of the same table again is allowed (the
// transaction already holds the earlier ones, so it cannot wait on itself
// for them).
//
// Queue rows (completion events, pending cancel groups) are taken before
// any of these and with SKIP LOCKED, so they never wait. Terminate takes
// its own locks, executions then flows; a caller that holds a flow calls
// it only on executions it already holds.
type Locks struct {
	tx pgx.Tx
	at rank
}

// NewLocks starts the lock sequence of one transaction.
func NewLocks(tx pgx.Tx) *Locks { return &Locks{tx: tx} }

func (l *Locks) take(r rank) error {
	if r < l.at {
		return fmt.Errorf("%w: %s after %s", ErrLockOrder, rankNames[r], rankNames[l.at])
	}
	l.at = r
	return nil
}

// Group locks one edge group and returns it. With a policy to create it
// with, a missing group is created (created reports it; a creation rolled
// back with the transaction leaves nothing); without, a missing group is
// pgx.ErrNoRows.
func (l *Locks) Group(ctx context.Context, flowID uuid.UUID, down ffdtype.ExecutionID, create *ffdtype.Policy) (g *ffdtype.EdgeGroup, created bool, err error) {
	if err := l.take(rankGroup); err != nil {
		return nil, false, err
	}
	part := ident.Partition(flowID)
	if create != nil {
		// The insert locks a row it creates; ON CONFLICT leaves an
		// existing one to the SELECT below.
		k, on := policyColumns(*create)
		err = l.tx.QueryRow(ctx, `INSERT INTO ff_edge_group (partition_key, flow_id, downstream_id, policy, k, on_satisfied)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (partition_key, flow_id, downstream_id) DO NOTHING
			RETURNING true`, part, flowID, down.UUID, string(create.Kind), k, on).Scan(&created)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, err
		}
	}
	g, err = oneGroup(l.tx.Query(ctx, `SELECT `+groupColumns+` FROM ff_edge_group g
		WHERE g.partition_key = $1 AND g.flow_id = $2 AND g.downstream_id = $3 FOR NO KEY UPDATE`, part, flowID, down.UUID))
	return g, created, err
}

// ResolveEdges locks the groups of the applied edges that resolving rs
// will touch, in key order, then resolves the edges and moves the
// groups' counters (resolveSQL): two statements in one pipelined batch,
// one round trip. Postgres runs a batch's statements one after the
// other, so every lock is held before the resolve touches a group, as
// when they went one round trip each.
func (l *Locks) ResolveEdges(ctx context.Context, rs []Resolution) ([]Moved, error) {
	if err := l.take(rankGroup); err != nil {
		return nil, err
	}
	parts, ups, outcomes, edges := resolutionArrays(rs)
	routed, one, err := routedPartitions(ctx, l.tx, parts)
	if err != nil {
		return nil, err
	}
	lock, lockArgs := groupsResolvingSQL, []any{parts, ups, edges}
	resolve, resolveArgs := resolveSQL, []any{parts, ups, outcomes, edges}
	if routed {
		lock, lockArgs = groupsResolvingRoutedSQL, append(lockArgs, one)
		resolve, resolveArgs = resolveRoutedSQL, append(resolveArgs, one)
	}
	var moved []Moved
	b := &pgx.Batch{}
	b.Queue(lock, lockArgs...)
	b.Queue(resolve, resolveArgs...).Query(func(rows pgx.Rows) error {
		var err error
		moved, err = collectMoved(rows)
		return err
	})
	return moved, l.tx.SendBatch(ctx, b).Close()
}

var (
	groupsResolvingSQL       = groupsResolvingStatement(false)
	groupsResolvingRoutedSQL = groupsResolvingStatement(true)
)

// groupsResolvingStatement locks the groups ResolveEdges touches,
// narrowed to the partitions $4 (of one shard) when routed.
func groupsResolvingStatement(routed bool) string {
	one := narrowTo(routed, "ANY($4::smallint[])")
	return `SELECT 1 FROM ff_edge_group g
		WHERE (g.partition_key, g.flow_id, g.downstream_id) IN (
			SELECT e.partition_key, e.flow_id, e.downstream_id
			FROM ff_edge e
			JOIN unnest($1::smallint[], $2::uuid[], $3::uuid[]) AS i(partition_key, upstream_id, edge_id)
				ON e.partition_key = i.partition_key AND e.upstream_id = i.upstream_id
			WHERE e.state = 'applied' AND (i.edge_id IS NULL OR e.edge_id = i.edge_id)` + one("e") + `)` + one("g") + `
		ORDER BY g.partition_key, g.flow_id, g.downstream_id
		FOR NO KEY UPDATE`
}

// Edge locks one edge and returns its state, or pgx.ErrNoRows.
func (l *Locks) Edge(ctx context.Context, flowID, edgeID uuid.UUID) (ffdtype.EdgeState, error) {
	if err := l.take(rankEdge); err != nil {
		return "", err
	}
	var s ffdtype.EdgeState
	err := l.tx.QueryRow(ctx, `SELECT state FROM ff_edge WHERE partition_key = $1 AND flow_id = $2 AND edge_id = $3
		FOR NO KEY UPDATE`, ident.Partition(flowID), flowID, edgeID).Scan(&s)
	return s, err
}

// Executions locks executions of one partition in id order and returns
// their states; an id without a row is absent from the map.
func (l *Locks) Executions(ctx context.Context, part int16, ids ...uuid.UUID) (map[uuid.UUID]ffdtype.State, error) {
	if err := l.take(rankExecution); err != nil {
		return nil, err
	}
	rows, err := l.tx.Query(ctx, `SELECT execution_id, state FROM ff_execution
		WHERE partition_key = $1 AND execution_id = ANY($2) ORDER BY execution_id FOR NO KEY UPDATE`, part, ids)
	if err != nil {
		return nil, err
	}
	states := make(map[uuid.UUID]ffdtype.State, len(ids))
	var id uuid.UUID
	var s ffdtype.State
	_, err = pgx.ForEachRow(rows, []any{&id, &s}, func() error {
		states[id] = s
		return nil
	})
	return states, err
}

// Membership is an execution's flow and state.
type Membership struct {
	FlowID *uuid.UUID
	State  ffdtype.State
}

// Execution locks one execution and returns its flow and state, or
// pgx.ErrNoRows.
func (l *Locks) Execution(ctx context.Context, id ffdtype.ExecutionID) (Membership, error) {
	if err := l.take(rankExecution); err != nil {
		return Membership{}, err
	}
	var m Membership
	err := l.tx.QueryRow(ctx, `SELECT flow_id, state FROM ff_execution WHERE partition_key = $1 AND execution_id = $2
		FOR NO KEY UPDATE`, id.Partition, id.UUID).Scan(&m.FlowID, &m.State)
	return m, err
}

// Members locks the members of a flow in one of the given states, in id
// order, and returns them as it read them: what an ending of them in the
// same transaction needs to know of each (Termination.Locked).
func (l *Locks) Members(ctx context.Context, flowID uuid.UUID, states []ffdtype.State) ([]LockedMember, error) {
	if err := l.take(rankExecution); err != nil {
		return nil, err
	}
	rows, err := l.tx.Query(ctx, lockMembersSQL, ident.Partition(flowID), flowID, states)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (LockedMember, error) {
		var m LockedMember
		var id pgtype.UUID
		var state string
		err := row.Scan(&id, &state, &m.Row.LeaseEpoch, &m.Row.LeaseExpiresAt)
		m.ID, m.Row.State = uuid.UUID(id.Bytes), ffdtype.State(state)
		return m, err
	})
}

// LockedMember is a flow member Locks.Members locked.
type LockedMember struct {
	ID  uuid.UUID
	Row LockedRow
}

// LockMode is the strength of a flow lock.
type LockMode int

const (
	// ForShare keeps the flow from changing state while a graph change
	// that depends on it commits; graph changes of their own still
	// serialize on the update they make.
	ForShare LockMode = iota
	// ForUpdate serializes membership changes and cancellation on the flow.
	ForUpdate
)

// Flow locks a flow and returns it, or pgx.ErrNoRows.
func (l *Locks) Flow(ctx context.Context, id uuid.UUID, mode LockMode) (*ffdtype.Flow, error) {
	if err := l.take(rankFlow); err != nil {
		return nil, err
	}
	sql := `SELECT ` + flowColumns + ` FROM ff_flow f WHERE f.partition_key = $1 AND f.flow_id = $2 FOR SHARE`
	if mode == ForUpdate {
		sql = lockFlowSQL
	}
	return oneFlow(l.tx.Query(ctx, sql, ident.Partition(id), id))
}

// lockMembersSQL locks a flow's members in the given states, in the
// global lock order.
const lockMembersSQL = `SELECT execution_id, state, lease_epoch, lease_expires_at FROM ff_execution
		WHERE partition_key = $1 AND flow_id = $2 AND state = ANY($3)
		ORDER BY partition_key, execution_id FOR NO KEY UPDATE`

// lockFlowSQL locks a flow for a change of membership or state.
const lockFlowSQL = `SELECT ` + flowColumns + ` FROM ff_flow f WHERE f.partition_key = $1 AND f.flow_id = $2 FOR NO KEY UPDATE`
