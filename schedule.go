package ffd

import (
	"context"

	"github.com/flowfabric/ffd/internal/schedule"
	"github.com/flowfabric/ffd/internal/store"
)

// ScheduleParams is a schedule to create. Each tick creates Execution or
// submits Flow: exactly one of them.
type ScheduleParams struct {
	// Name identifies the schedule: 1-128 of A-Z a-z 0-9 _ . : -. Required.
	Name string
	// Namespace of everything it creates. Default: the client's.
	Namespace string
	// Cron is when it fires: five fields (minute hour day-of-month month
	// day-of-week), six with a seconds field first, or @hourly, @daily,
	// @weekly, @monthly, @every 90s. Required.
	Cron string
	// Timezone is the IANA zone Cron is read in. Default UTC.
	Timezone string
	// Missed is the missed-tick policy. Default MissedLatest.
	Missed MissedPolicy
	// Paused creates the schedule paused.
	Paused bool
	// Execution is what each tick creates. Leave IdempotencyKey empty:
	// the schedule keys each tick's execution itself.
	Execution *CreateParams
	// Flow is what each tick submits. Leave Flow.ID empty: the schedule
	// names each tick's flow itself.
	Flow *SubmitFlowParams
}

func scheduleOf(s *store.ScheduleRow, err error) (*Schedule, error) {
	if err != nil {
		return nil, err
	}
	return &s.Schedule, nil
}

// CreateSchedule stores a schedule, due at its first tick after now.
// Daemons fire it: each tick exactly once, however many run. Everything
// a tick will create is validated now. A name in use is a
// *ConflictError carrying the existing schedule.
func (c *Client) CreateSchedule(ctx context.Context, p ScheduleParams) (*Schedule, error) {
	return scheduleOf(schedule.Create(ctx, c.pool, c.limits, c.scheduleParams(p)))
}

// PutSchedule creates a schedule, or replaces the definition of the one
// of that name: the call for an application that declares its
// schedules each time it starts. A replaced schedule keeps its next tick
// when Cron and Timezone are unchanged, and keeps whether it is paused
// (an operator's pause survives a restart; p.Paused applies only to a
// new schedule), when it last fired and how often. A definition equal
// to the stored one writes nothing. Validation is CreateSchedule's.
func (c *Client) PutSchedule(ctx context.Context, p ScheduleParams) (*Schedule, error) {
	s, _, err := schedule.Put(ctx, c.pool, c.limits, c.scheduleParams(p))
	return scheduleOf(s, err)
}

// scheduleParams converts p for internal/schedule.
func (c *Client) scheduleParams(p ScheduleParams) schedule.Params {
	if p.Namespace == "" {
		p.Namespace = c.cfg.Namespace
	}
	sp := schedule.Params{Name: p.Name, Namespace: p.Namespace, Spec: p.Cron, Timezone: p.Timezone, Missed: string(p.Missed), Paused: p.Paused}
	if p.Execution != nil {
		ep := *p.Execution
		ep.Namespace = p.Namespace
		sp.Execution = &ep
	}
	if p.Flow != nil {
		fp := *p.Flow
		fp.Flow.Namespace = p.Namespace
		fp = c.inNamespace(fp)
		sp.Flow = &fp
	}
	return sp
}

// ListSchedules lists every schedule, by name.
func (c *Client) ListSchedules(ctx context.Context) ([]*Schedule, error) {
	ss, err := store.ListSchedules(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	out := make([]*Schedule, len(ss))
	for i, s := range ss {
		out[i], _ = scheduleOf(s, nil)
	}
	return out, nil
}

// GetSchedule reads one schedule; a *NotFoundError when there is none.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	return scheduleOf(schedule.Get(ctx, c.pool, name))
}

// PauseSchedule stops a schedule from firing until ResumeSchedule.
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return scheduleOf(schedule.SetPaused(ctx, c.pool, name, true))
}

// ResumeSchedule makes a paused schedule fire again, from its first tick
// after now: ticks that passed while it was paused never fire.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return scheduleOf(schedule.SetPaused(ctx, c.pool, name, false))
}

// DeleteSchedule removes a schedule; what it created stays.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return schedule.Delete(ctx, c.pool, name)
}
