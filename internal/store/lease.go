package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/flowfabric/ffd/ffdtype"
)

// isRunning is the fence's test that a row (of alias, "" or "e.") is
// running, for a statement that finds its row by its key. Written as
// state = 'running', the planner may answer it from a partial index of
// running rows (ff_execution_lease_expiry) instead of the primary key:
// it did when the statistics said nothing was running (gathered while
// the queue was idle), and every renewal then read every running row
// (69 ms each at 20,000 running; docs/benchmarks.md). IS NOT DISTINCT
// FROM is the same test for a state, which is never NULL, and no index
// predicate implies it.
func isRunning(alias string) string { return alias + "state IS NOT DISTINCT FROM 'running'" }

// renewSQL extends a running lease by its TTL, fenced on the epoch, and
// writes the renewed lease event. One statement on one partition, which a
// distributed Postgres routes to the shard (nowPlus).
var renewSQL = `
WITH upd AS (
	UPDATE ff_execution SET lease_expires_at = ` + nowPlus(intervalSeconds("lease_ttl")) + `
	WHERE partition_key = $1 AND execution_id = $2 AND ` + isRunning("") + ` AND lease_epoch = $3
	RETURNING partition_key, execution_id, lease_epoch, attempt, lease_owner, lease_expires_at
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
	SELECT partition_key, execution_id, lease_epoch, attempt, lease_owner, $4, lease_expires_at FROM upd
)
SELECT lease_expires_at FROM upd`

// Renew extends the lease of id held at epoch and returns its new expiry;
// held is false when id does not run at that epoch (nothing was written).
func Renew(ctx context.Context, db DB, id ffdtype.ExecutionID, epoch int64) (expires time.Time, held bool, err error) {
	notices := &Notices{}
	notices.LeaseEvents(id.Partition) // the renewed event, for the outbox's consumers
	err = WithRetry(ctx, db, func() error {
		return queryNotifying(ctx, db, notices, func(rows pgx.Rows) error {
			var err error
			expires, err = pgx.CollectExactlyOneRow(rows, pgx.RowTo[time.Time])
			return err
		}, renewSQL, id.Partition, id.UUID, epoch, LeaseRenewed)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, wrap("renew lease of "+id.String(), err)
	}
	return expires, true, nil
}

// renewManyStatement extends the leases of its input ($1 partitions, $2
// ids, $3 epochs) that still run at their epochs, each by its own TTL,
// and writes their renewed lease events ($4); routed, it names the
// partitions of one shard ($5). A row another transaction holds locked
// (a cancel, the cascade, an expiry under way) is skipped, not waited
// for: one such row must not hold up every other lease of the batch, and
// the caller renews what was skipped on its own (Renew), which waits for
// the lock and says whether the lease is still held. The rows are locked
// in the global order; their fence reads isRunning, so the planner finds
// each by its primary key, as the single renewal does.
func renewManyStatement(routed bool) string {
	one := narrowTo(routed, "ANY($5::smallint[])")
	return `
WITH upd AS (
	UPDATE ff_execution e SET lease_expires_at = ` + nowPlus(intervalSeconds("e.lease_ttl")) + `
	FROM (
		SELECT x.partition_key, x.execution_id
		FROM ff_execution x
		JOIN unnest($1::smallint[], $2::uuid[], $3::bigint[]) AS i(partition_key, execution_id, epoch)
			ON x.partition_key = i.partition_key AND x.execution_id = i.execution_id
		WHERE ` + isRunning("x.") + ` AND x.lease_epoch = i.epoch` + one("x") + `
		ORDER BY x.partition_key, x.execution_id
		FOR NO KEY UPDATE OF x SKIP LOCKED
	) l
	WHERE e.partition_key = l.partition_key AND e.execution_id = l.execution_id` + one("e") + `
	RETURNING e.partition_key, e.execution_id, e.lease_epoch, e.attempt, e.lease_owner, e.lease_expires_at
), lev AS (
	INSERT INTO ff_lease_event (partition_key, execution_id, lease_epoch, attempt, worker, event_type, lease_expires_at)
	SELECT partition_key, execution_id, lease_epoch, attempt, lease_owner, $4, lease_expires_at FROM upd
)
SELECT partition_key, execution_id, lease_epoch, lease_expires_at FROM upd`
}

var (
	renewManySQL       = renewManyStatement(false)
	renewManyRoutedSQL = renewManyStatement(true)
)

// RenewMany extends the leases held that still run at their epochs, each
// by its TTL, with a renewed lease event each, and returns the new
// expiries of those it renewed. A lease it leaves out was lost, or its
// row was locked by another transaction: the caller renews those with
// Renew, which waits for the lock and tells the two apart. On an error
// nothing is known of the leases it leaves out.
//
// One statement and its notice in one round trip. On a distributed
// Postgres one statement per shard, each a transaction of its own that
// commits on the node holding the shard, up to shardWriters at once on a
// pool; a shard that fails leaves the others renewed.
func RenewMany(ctx context.Context, db DB, held []LeaseRef) (map[LeaseRef]time.Time, error) {
	out := make(map[LeaseRef]time.Time, len(held))
	if len(held) == 0 {
		return out, nil
	}
	routed, err := Distributed(ctx, db)
	if err != nil {
		return out, wrap("renew leases", err)
	}
	if !routed {
		return out, renewGroup(ctx, db, held, nil, out)
	}
	groups, err := byShard(ctx, db, held, func(l LeaseRef) int16 { return l.ID.Partition })
	if err != nil {
		return out, wrap("renew leases", err)
	}
	got, errs := make([]map[LeaseRef]time.Time, len(groups)), make([]error, len(groups))
	eachGroup(db, len(groups), func(i int) {
		got[i] = map[LeaseRef]time.Time{}
		errs[i] = renewGroup(ctx, db, groups[i].items, groups[i].parts, got[i])
	})
	for _, g := range got {
		maps.Copy(out, g)
	}
	return out, errors.Join(errs...)
}

// renewGroup renews held in one statement (routed: naming parts, the
// partitions of one shard) and adds what it renewed to out.
func renewGroup(ctx context.Context, db DB, held []LeaseRef, parts []int16, out map[LeaseRef]time.Time) error {
	n := len(held)
	ps, ids, epochs := make([]int16, n), make([]pgtype.UUID, n), make([]int64, n)
	notices := &Notices{}
	for i, l := range held {
		ps[i], ids[i], epochs[i] = l.ID.Partition, pgUUID(l.ID.UUID), l.Epoch
		notices.LeaseEvents(l.ID.Partition) // the renewed events, for the outbox's consumers
	}
	sql, args := renewManySQL, []any{ps, ids, epochs, LeaseRenewed}
	if parts != nil {
		sql, args = renewManyRoutedSQL, append(args, parts)
	}
	err := WithRetry(ctx, db, func() error {
		clear(out)
		return queryNotifying(ctx, db, notices, func(rows pgx.Rows) error {
			var l LeaseRef
			var at time.Time
			_, err := pgx.ForEachRow(rows, []any{&l.ID.Partition, &l.ID.UUID, &l.Epoch, &at}, func() error {
				out[l] = at
				return nil
			})
			return err
		}, sql, args...)
	})
	if err != nil {
		what := fmt.Sprintf("renew %d leases", n)
		if n == 1 {
			what = "renew 1 lease"
		}
		return wrap(what, unroutable(db, err))
	}
	return nil
}

// Fence is an execution's state and current lease epoch.
type Fence struct {
	State ffdtype.State `db:"state"`
	Epoch int64         `db:"lease_epoch"`
}

// ReadFence reads id's state and epoch, or returns pgx.ErrNoRows.
func ReadFence(ctx context.Context, db DB, id ffdtype.ExecutionID) (Fence, error) {
	rows, err := db.Query(ctx, `SELECT state, lease_epoch FROM ff_execution
		WHERE partition_key = $1 AND execution_id = $2`, id.Partition, id.UUID)
	if err != nil {
		return Fence{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Fence])
}

// EpochAttempt is an execution and the attempt it ran under one epoch.
type EpochAttempt struct {
	State   ffdtype.State `db:"state"`
	Attempt int           `db:"attempt"` // the execution's current attempt
	Result  []byte        `db:"result"`
	RunAt   time.Time     `db:"run_at"`
	// OfEpoch and Outcome are the attempt run under the epoch asked for;
	// nil when there was none.
	OfEpoch *int                    `db:"attempt_of_epoch"`
	Outcome *ffdtype.AttemptOutcome `db:"outcome"`
}

// ReadEpochAttempt reads id and the attempt it ran at epoch, or returns
// pgx.ErrNoRows when id does not exist.
func ReadEpochAttempt(ctx context.Context, db DB, id ffdtype.ExecutionID, epoch int64) (EpochAttempt, error) {
	rows, err := db.Query(ctx, `
		SELECT e.state, e.attempt, e.result, e.run_at, a.attempt AS attempt_of_epoch, a.outcome
		FROM ff_execution e
		LEFT JOIN ff_attempt_all a ON a.partition_key = e.partition_key AND a.execution_id = e.execution_id
			AND a.lease_epoch = $3
		WHERE e.partition_key = $1 AND e.execution_id = $2`, id.Partition, id.UUID, epoch)
	if err != nil {
		return EpochAttempt{}, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[EpochAttempt])
}

// Lapsed is a running execution whose lease lapsed or whose attempt ran
// out of time, locked by the current transaction.
type Lapsed struct {
	ID          ffdtype.ExecutionID
	Epoch       int64
	Attempt     int
	MaxAttempts int  // with the attempts that ended in waits, which do not count
	LeaseLapsed bool // the lease lapsed; else the attempt timed out
}

const lapsedColumns = `partition_key, execution_id, lease_epoch, attempt, max_attempts, lease_expires_at <= now()`

// WaitsOf reads how many attempts of each execution ended in a wait
// (ff_wait.waits; those that never waited are left out): they do not
// count against max_attempts. The statements that lock executions
// cannot read it themselves: a distributed Postgres refuses a locking
// statement that also reads another table. It changes only when a wait
// begins, which holds the execution's lease, so a value read before a
// fenced statement, or after a lock, is the one that holds for it.
func WaitsOf(ctx context.Context, db DB, ids []ffdtype.ExecutionID) (map[ffdtype.ExecutionID]int, error) {
	parts, us := make([]int16, len(ids)), make([]pgtype.UUID, len(ids))
	for i, id := range ids {
		parts[i], us[i] = id.Partition, pgUUID(id.UUID)
	}
	rows, err := db.Query(ctx, `SELECT w.partition_key, w.execution_id, w.waits FROM ff_wait w
		JOIN unnest($1::smallint[], $2::uuid[]) AS i(partition_key, execution_id)
			ON w.partition_key = i.partition_key AND w.execution_id = i.execution_id`, parts, us)
	if err != nil {
		return nil, wrap("read the waits of executions", unroutable(db, err))
	}
	out := map[ffdtype.ExecutionID]int{}
	var id ffdtype.ExecutionID
	var n int
	_, err = pgx.ForEachRow(rows, []any{&id.Partition, &id.UUID, &n}, func() error {
		out[id] = n
		return nil
	})
	return out, wrap("read the waits of executions", err)
}

// withWaits adds to each lapsed lease's attempt budget the attempts of
// its execution that ended in waits, which its lock holds steady.
func withWaits(ctx context.Context, tx pgx.Tx, ls []Lapsed, err error) ([]Lapsed, error) {
	if err != nil || len(ls) == 0 {
		return ls, err
	}
	ids := make([]ffdtype.ExecutionID, len(ls))
	for i, l := range ls {
		ids[i] = l.ID
	}
	waits, err := WaitsOf(ctx, tx, ids)
	if err != nil {
		return nil, err
	}
	for i := range ls {
		ls[i].MaxAttempts += waits[ls[i].ID]
	}
	return ls, nil
}

// LockLapsed locks those of the given leases that are still held (the
// execution runs at that epoch) and lapsed or whose attempt timed out, in
// the global lock order, skipping rows another transaction holds (its
// holder is ending or renewing them; a later check or the sweep sees what
// it left).
func LockLapsed(ctx context.Context, tx pgx.Tx, held []LeaseRef) ([]Lapsed, error) {
	ls, err := lockLapsed(ctx, tx, held)
	return withWaits(ctx, tx, ls, err)
}

func lockLapsed(ctx context.Context, tx pgx.Tx, held []LeaseRef) ([]Lapsed, error) {
	dist, err := Distributed(ctx, tx)
	if err != nil {
		return nil, err
	}
	if !dist {
		parts, ids, epochs := make([]int16, len(held)), make([]pgtype.UUID, len(held)), make([]int64, len(held))
		for i, l := range held {
			parts[i], ids[i], epochs[i] = l.ID.Partition, pgUUID(l.ID.UUID), l.Epoch
		}
		return collectLapsed(tx.Query(ctx, `SELECT `+lapsedColumns+` FROM ff_execution
		WHERE (partition_key, execution_id, lease_epoch) IN (
				SELECT * FROM unnest($1::smallint[], $2::uuid[], $3::bigint[]))
			AND state = 'running' AND (lease_expires_at <= now() OR attempt_deadline_at <= now())
		ORDER BY partition_key, execution_id
		FOR NO KEY UPDATE SKIP LOCKED`, parts, ids, epochs))
	}
	// One statement per partition, in partition order, in one round trip.
	var out []Lapsed
	b := &pgx.Batch{}
	for _, ls := range byPartition(held, func(l LeaseRef) int16 { return l.ID.Partition }) {
		ids, epochs := make([]pgtype.UUID, len(ls)), make([]int64, len(ls))
		for i, l := range ls {
			ids[i], epochs[i] = pgUUID(l.ID.UUID), l.Epoch
		}
		b.Queue(`SELECT e.partition_key, e.execution_id, e.lease_epoch, e.attempt, e.max_attempts, e.lease_expires_at <= now()
			FROM ff_execution e
			JOIN unnest($2::uuid[], $3::bigint[]) AS i(execution_id, epoch)
				ON e.execution_id = i.execution_id AND e.lease_epoch = i.epoch
			WHERE e.partition_key = $1 AND e.state = 'running'
				AND (e.lease_expires_at <= now() OR e.attempt_deadline_at <= now())
			ORDER BY e.execution_id
			FOR NO KEY UPDATE OF e SKIP LOCKED`, ls[0].ID.Partition, ids, epochs).Query(func(rows pgx.Rows) error {
			ls, err := collectLapsed(rows, nil)
			out = append(out, ls...)
			return err
		})
	}
	return out, tx.SendBatch(ctx, b).Close()
}

// LockLapsedBatch locks up to limit lapsed leases and timed-out attempts,
// skipping rows other sweepers hold.
func LockLapsedBatch(ctx context.Context, tx pgx.Tx, limit int) ([]Lapsed, error) {
	ls, err := lockLapsedBatch(ctx, tx, limit)
	return withWaits(ctx, tx, ls, err)
}

func lockLapsedBatch(ctx context.Context, tx pgx.Tx, limit int) ([]Lapsed, error) {
	const where = `state = 'running' AND (lease_expires_at <= now() OR attempt_deadline_at <= now())`
	dist, err := Distributed(ctx, tx)
	if err != nil {
		return nil, err
	}
	if !dist {
		return collectLapsed(tx.Query(ctx, `SELECT `+lapsedColumns+` FROM ff_execution
		WHERE `+where+`
		ORDER BY partition_key, execution_id
		LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED`, limit))
	}
	return lockFound(ctx, tx, where, limit, lapsedColumns, collectLapsed)
}

// lockFound is a sweep's locking read on a distributed Postgres: it finds
// up to limit executions matching where without locks (a read may span
// every shard), then locks those still matching, one statement per
// partition (in partition order, one round trip), skipping rows another
// transaction holds.
func lockFound[T any](ctx context.Context, tx pgx.Tx, where string, limit int, columns string, collect func(pgx.Rows, error) ([]T, error)) ([]T, error) {
	found, err := collectIDs(tx.Query(ctx, `SELECT partition_key, execution_id FROM ff_execution
		WHERE `+where+` ORDER BY partition_key, execution_id LIMIT $1`, limit))
	if err != nil {
		return nil, err
	}
	var out []T
	b := &pgx.Batch{}
	for _, g := range byPartition(found, func(id ffdtype.ExecutionID) int16 { return id.Partition }) {
		ids := make([]pgtype.UUID, len(g))
		for i, id := range g {
			ids[i] = pgUUID(id.UUID)
		}
		b.Queue(`SELECT `+columns+` FROM ff_execution
			WHERE partition_key = $1 AND execution_id = ANY($2) AND `+where+`
			ORDER BY execution_id
			FOR NO KEY UPDATE SKIP LOCKED`, g[0].Partition, ids).Query(func(rows pgx.Rows) error {
			xs, err := collect(rows, nil)
			out = append(out, xs...)
			return err
		})
	}
	if b.Len() == 0 {
		return nil, nil
	}
	return out, tx.SendBatch(ctx, b).Close()
}

func collectLapsed(rows pgx.Rows, err error) ([]Lapsed, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Lapsed, error) {
		var l Lapsed
		err := r.Scan(&l.ID.Partition, &l.ID.UUID, &l.Epoch, &l.Attempt, &l.MaxAttempts, &l.LeaseLapsed)
		return l, err
	})
}

// LockDeadlinePassed locks id if it is live and its deadline has passed
// (skipping it when another transaction holds it).
func LockDeadlinePassed(ctx context.Context, tx pgx.Tx, id ffdtype.ExecutionID) ([]ffdtype.ExecutionID, error) {
	return collectIDs(tx.Query(ctx, `SELECT partition_key, execution_id FROM ff_execution
		WHERE deadline_at <= now() AND state IN ('blocked', 'pending', 'running')
			AND partition_key = $1 AND execution_id = $2
		FOR NO KEY UPDATE SKIP LOCKED`, id.Partition, id.UUID))
}

// LockDeadlinesPassed locks up to limit live executions whose deadline has
// passed, skipping rows other sweepers hold.
func LockDeadlinesPassed(ctx context.Context, tx pgx.Tx, limit int) ([]ffdtype.ExecutionID, error) {
	const where = `deadline_at <= now() AND state IN ('blocked', 'pending', 'running')`
	dist, err := Distributed(ctx, tx)
	if err != nil {
		return nil, err
	}
	if dist {
		return lockFound(ctx, tx, where, limit, `partition_key, execution_id`, collectIDs)
	}
	return collectIDs(tx.Query(ctx, `SELECT partition_key, execution_id FROM ff_execution
		WHERE `+where+`
		ORDER BY partition_key, execution_id LIMIT $1
		FOR NO KEY UPDATE SKIP LOCKED`, limit))
}

func collectIDs(rows pgx.Rows, err error) ([]ffdtype.ExecutionID, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (ffdtype.ExecutionID, error) {
		var id ffdtype.ExecutionID
		return id, r.Scan(&id.Partition, &id.UUID)
	})
}
