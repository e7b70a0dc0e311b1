package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/jackc/pgx/v5"
)

// ScheduleRow is one row of ff_schedule: the schedule callers see, and
// what its ticks create (Params, in the schedule wire format).
type ScheduleRow struct {
	ffdtype.Schedule
	Params    json.RawMessage
	UpdatedAt time.Time
}

const scheduleColumns = `name, namespace, spec, timezone, target, params, missed, paused, next_run_at, last_run_at,
	fired, created_at, updated_at`

func collectSchedules(rows pgx.Rows, err error) ([]*ScheduleRow, error) {
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (*ScheduleRow, error) {
		var s ScheduleRow
		err := row.Scan(&s.Name, &s.Namespace, &s.Cron, &s.Timezone, &s.Target, &s.Params, &s.Missed, &s.Paused,
			&s.NextRunAt, &s.LastRunAt, &s.Fired, &s.CreatedAt, &s.UpdatedAt)
		return &s, err
	})
}

// IsScheduleTaken reports an insert of a schedule whose name exists.
func IsScheduleTaken(err error) bool {
	return refusedBy(err, "23505", "ff_schedule_pkey")
}

// InsertSchedule inserts a schedule.
func InsertSchedule(ctx context.Context, db DB, s ScheduleRow) (*ScheduleRow, error) {
	xs, err := collectSchedules(db.Query(ctx, `INSERT INTO ff_schedule (name, namespace, spec, timezone, target, params, missed, paused, next_run_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING `+scheduleColumns,
		s.Name, s.Namespace, s.Cron, s.Timezone, s.Target, s.Params, s.Missed, s.Paused, s.NextRunAt))
	if err != nil {
		return nil, err
	}
	return xs[0], nil
}

// PutSchedule stores s, or replaces the definition of the schedule of
// that name, in one statement. A replaced schedule keeps its next tick
// when its spec and time zone are unchanged, and always keeps whether
// it is paused, when it last fired and how often (an operator's pause
// survives an application that declares its schedules at every start).
// An unchanged definition writes nothing. changed is false then.
func PutSchedule(ctx context.Context, db DB, s ScheduleRow) (sched *ScheduleRow, changed bool, err error) {
	xs, err := collectSchedules(db.Query(ctx, `INSERT INTO ff_schedule AS o (name, namespace, spec, timezone, target, params, missed, paused, next_run_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, now())
		ON CONFLICT (name) DO UPDATE SET namespace = excluded.namespace, spec = excluded.spec, timezone = excluded.timezone,
			target = excluded.target, params = excluded.params, missed = excluded.missed, updated_at = excluded.updated_at,
			next_run_at = CASE WHEN o.spec = excluded.spec AND o.timezone = excluded.timezone THEN o.next_run_at ELSE excluded.next_run_at END
		WHERE (o.namespace, o.spec, o.timezone, o.target, o.params, o.missed)
			IS DISTINCT FROM (excluded.namespace, excluded.spec, excluded.timezone, excluded.target, excluded.params, excluded.missed)
		RETURNING `+scheduleColumns,
		s.Name, s.Namespace, s.Cron, s.Timezone, s.Target, s.Params, s.Missed, s.Paused, s.NextRunAt))
	if err != nil {
		return nil, false, wrap("put schedule "+s.Name, err)
	}
	if len(xs) == 1 {
		return xs[0], true, nil
	}
	got, err := GetSchedule(ctx, db, s.Name)
	return got, false, wrap("read schedule "+s.Name, err)
}

// ListSchedules reads every schedule, by name.
func ListSchedules(ctx context.Context, db DB) ([]*ScheduleRow, error) {
	xs, err := collectSchedules(db.Query(ctx, `SELECT `+scheduleColumns+` FROM ff_schedule ORDER BY name`))
	return xs, wrap("list schedules", err)
}

// LockSchedule reads one schedule under a row lock, or pgx.ErrNoRows.
func LockSchedule(ctx context.Context, tx pgx.Tx, name string) (*ScheduleRow, error) {
	xs, err := collectSchedules(tx.Query(ctx, `SELECT `+scheduleColumns+` FROM ff_schedule WHERE name = $1 FOR UPDATE`, name))
	if err != nil {
		return nil, err
	}
	if len(xs) == 0 {
		return nil, pgx.ErrNoRows
	}
	return xs[0], nil
}

// LockDueSchedules locks up to limit unpaused schedules due at or before
// now, skipping those another daemon holds.
func LockDueSchedules(ctx context.Context, tx pgx.Tx, limit int) ([]*ScheduleRow, error) {
	xs, err := collectSchedules(tx.Query(ctx, `SELECT `+scheduleColumns+` FROM ff_schedule
		WHERE NOT paused AND next_run_at <= clock_timestamp()
		ORDER BY next_run_at LIMIT $1 FOR UPDATE SKIP LOCKED`, limit))
	return xs, wrap("lock due schedules", err)
}

// AdvanceSchedule records a firing pass: fired more ticks, the next one
// due at next. (now(), the firing transaction's start, and no function
// inside a CASE: a distributed Postgres refuses a volatile function such
// as clock_timestamp() in an UPDATE, and any but an immutable one in a
// CASE.)
func AdvanceSchedule(ctx context.Context, tx pgx.Tx, name string, fired int, next time.Time) error {
	fields := `next_run_at = $2, fired = fired + $3, updated_at = now()`
	if fired > 0 {
		fields += `, last_run_at = now()`
	}
	_, err := tx.Exec(ctx, `UPDATE ff_schedule SET `+fields+` WHERE name = $1`, name, next, fired)
	return wrap("advance schedule "+name, err)
}

// SetSchedulePaused pauses or resumes a schedule (locked by the caller)
// and sets its next run.
func SetSchedulePaused(ctx context.Context, tx pgx.Tx, name string, paused bool, next time.Time) error {
	_, err := tx.Exec(ctx, `UPDATE ff_schedule SET paused = $2, next_run_at = $3, updated_at = now() WHERE name = $1`, name, paused, next)
	return wrap("pause or resume schedule "+name, err)
}

// DeleteSchedule deletes a schedule; it reports whether it existed.
func DeleteSchedule(ctx context.Context, db DB, name string) (bool, error) {
	tag, err := db.Exec(ctx, `DELETE FROM ff_schedule WHERE name = $1`, name)
	if err != nil {
		return false, wrap("delete schedule "+name, err)
	}
	return tag.RowsAffected() == 1, nil
}

// ScheduledExecutions lists the executions a schedule created (by their
// idempotency keys' prefix), for tests and `ffd schedule list`.
func ScheduledExecutions(ctx context.Context, db DB, namespace, keyPrefix string) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT idempotency_key FROM ff_execution
		WHERE namespace = $1 AND idempotency_key LIKE $2 || '%' ORDER BY idempotency_key`, namespace, keyPrefix)
	if err != nil {
		return nil, wrap("list scheduled executions", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	return keys, wrap("list scheduled executions", err)
}

// Now is the database's clock.
func Now(ctx context.Context, db DB) (time.Time, error) {
	var t time.Time
	err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&t)
	return t, wrap("read the database clock", err)
}

// GetSchedule reads one schedule, or pgx.ErrNoRows.
func GetSchedule(ctx context.Context, db DB, name string) (*ScheduleRow, error) {
	xs, err := collectSchedules(db.Query(ctx, `SELECT `+scheduleColumns+` FROM ff_schedule WHERE name = $1`, name))
	if err != nil {
		return nil, wrap("read schedule "+name, err)
	}
	if len(xs) == 0 {
		return nil, pgx.ErrNoRows
	}
	return xs[0], nil
}
