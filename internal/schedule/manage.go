package schedule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/wire"
)

// Params is a schedule to create: a tick creates Execution, or submits
// Flow (exactly one of them).
type Params struct {
	Name      string
	Namespace string // default leases.DefaultNamespace
	Spec      string
	Timezone  string // IANA; default UTC
	Missed    string // default MissedLatest
	Paused    bool
	Execution *ffdtype.CreateParams
	Flow      *ffdtype.SubmitFlowParams
}

// Create validates a schedule, everything a tick will create included,
// and stores it, due at its first tick after now. A name in use is a
// conflict carrying the existing schedule.
func Create(ctx context.Context, db store.DB, lim leases.Limits, p Params) (*store.ScheduleRow, error) {
	row, spec, err := validate(lim, p)
	if err != nil {
		return nil, err
	}
	now, err := store.Now(ctx, db)
	if err != nil {
		return nil, err
	}
	if row.NextRunAt = spec.Next(now); row.NextRunAt.IsZero() {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "cron", p.Spec, "it never fires: no date matches")
	}
	s, err := store.InsertSchedule(ctx, db, row)
	if store.IsScheduleTaken(err) {
		existing, _ := Get(ctx, db, p.Name)
		return nil, &ffdtype.ConflictError{Object: "schedule", ID: p.Name, Reason: "a schedule with this name exists; delete it first, or put it (PutSchedule, ffd schedule create --replace) to replace its definition", Existing: existing}
	}
	if err != nil {
		return nil, fmt.Errorf("create schedule %s: %w", p.Name, err)
	}
	return s, nil
}

// Put validates a schedule like Create and stores it, or replaces the
// definition of the schedule of that name (store.PutSchedule says what a
// replacement keeps). changed is false when the stored definition was
// already p's.
func Put(ctx context.Context, db store.DB, lim leases.Limits, p Params) (*store.ScheduleRow, bool, error) {
	row, spec, err := validate(lim, p)
	if err != nil {
		return nil, false, err
	}
	now, err := store.Now(ctx, db)
	if err != nil {
		return nil, false, err
	}
	if row.NextRunAt = spec.Next(now); row.NextRunAt.IsZero() {
		return nil, false, fault.Invalid(ffdtype.KindInvalidValue, "cron", p.Spec, "it never fires: no date matches")
	}
	return store.PutSchedule(ctx, db, row)
}

// validate checks p and builds its row.
func validate(lim leases.Limits, p Params) (store.ScheduleRow, *Spec, error) {
	if err := leases.ValidateName("name", p.Name); err != nil {
		return store.ScheduleRow{}, nil, err
	}
	if err := leases.NormalizeNamespace(&p.Namespace); err != nil {
		return store.ScheduleRow{}, nil, err
	}
	spec, err := Parse(p.Spec, p.Timezone)
	if err != nil {
		return store.ScheduleRow{}, nil, err
	}
	missed, err := ValidMissed(p.Missed)
	if err != nil {
		return store.ScheduleRow{}, nil, err
	}
	row := store.ScheduleRow{Schedule: ffdtype.Schedule{Name: p.Name, Namespace: p.Namespace, Cron: p.Spec, Timezone: p.Timezone, Missed: ffdtype.MissedPolicy(missed), Paused: p.Paused}}
	if row.Timezone == "" {
		row.Timezone = DefaultTimezone
	}
	if row.Target, row.Params, err = EncodeTarget(lim, p.Namespace, p.Execution, p.Flow, "a schedule", "tick"); err != nil {
		return store.ScheduleRow{}, nil, err
	}
	return row, spec, nil
}

// EncodeTarget checks what one firing (a schedule's tick, a trigger's
// event) creates, exactly one of exec and flow, in namespace ns, and
// returns its target and stored params. who and each name the firer in
// errors ("a schedule", "tick").
func EncodeTarget(lim leases.Limits, ns string, exec *ffdtype.CreateParams, flow *ffdtype.SubmitFlowParams, who, each string) (string, json.RawMessage, error) {
	switch {
	case (exec == nil) == (flow == nil):
		return "", nil, fault.Invalid(ffdtype.KindRequired, "target", "", "give an execution or a flow, not both")
	case exec != nil:
		x := *exec
		err := leases.EncodePayload(&x)
		if err == nil {
			err = validExecution(lim, x, ns, who, each)
		}
		if err != nil {
			return "", nil, err
		}
		params, err := wire.EncodeExecution(x)
		return TargetExecution, params, err
	default:
		f, err := flows.EncodePayloads(*flow)
		if err != nil {
			return "", nil, err
		}
		if err := validFlow(lim, f, ns, who, each); err != nil {
			return "", nil, err
		}
		params, err := wire.EncodeFlow(f)
		return TargetFlow, params, err
	}
}

func validExecution(lim leases.Limits, p ffdtype.CreateParams, ns, who, each string) error {
	if p.IdempotencyKey != "" {
		return fault.Invalid(ffdtype.KindInvalidValue, "idempotency_key", p.IdempotencyKey, who+" keys each "+each+"'s execution itself")
	}
	if p.Debounce != nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "debounce.key", p.Debounce.Key, who+" creates one execution a "+each+": no debounce")
	}
	p.Namespace = ns
	_, err := leases.Normalize(p, leases.Placement{}, lim)
	return err
}

func validFlow(lim leases.Limits, p ffdtype.SubmitFlowParams, ns, who, each string) error {
	if p.Flow.ID != uuid.Nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "flow.id", p.Flow.ID.String(), who+" names each "+each+"'s flow itself")
	}
	p.Flow.Namespace = ns
	return flows.Validate(p, lim)
}

// Get reads one schedule.
func Get(ctx context.Context, db store.DB, name string) (*store.ScheduleRow, error) {
	s, err := store.GetSchedule(ctx, db, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "schedule", ID: name}
	}
	return s, err
}

// SetPaused pauses or resumes a schedule. Resuming makes it due at its
// first tick after now: ticks that passed while it was paused never fire.
func SetPaused(ctx context.Context, db store.DB, name string, paused bool) (*store.ScheduleRow, error) {
	var out *store.ScheduleRow
	err := store.InTx(ctx, db, func(tx pgx.Tx) error {
		s, err := store.LockSchedule(ctx, tx, name)
		if errors.Is(err, pgx.ErrNoRows) {
			return &ffdtype.NotFoundError{Object: "schedule", ID: name}
		}
		if err != nil {
			return err
		}
		next := s.NextRunAt
		if !paused && s.Paused {
			spec, err := Parse(s.Cron, s.Timezone)
			if err != nil {
				return err
			}
			now, err := store.Now(ctx, tx)
			if err != nil {
				return err
			}
			next = spec.Next(now)
		}
		if err := store.SetSchedulePaused(ctx, tx, name, paused, next); err != nil {
			return err
		}
		s.Paused, s.NextRunAt = paused, next
		out = s
		return nil
	})
	return out, err
}

// Delete removes a schedule; what it created stays.
func Delete(ctx context.Context, db store.DB, name string) error {
	ok, err := store.DeleteSchedule(ctx, db, name)
	if err != nil {
		return err
	}
	if !ok {
		return &ffdtype.NotFoundError{Object: "schedule", ID: name}
	}
	return nil
}
