// Package schedule fires cron-like schedules: each tick creates an
// execution or submits a flow, exactly once however many daemons run.
//
// A daemon takes due schedules with FOR UPDATE SKIP LOCKED, creates what
// each due tick asks for, and moves the schedule's next_run_at past now,
// all in one transaction: another daemon either waits for none of it
// (skipped rows) or sees it all. What a tick creates carries an id derived
// from the schedule's name and the tick (an idempotency key, or the flow
// id), so even a tick planned twice would create one thing.
package schedule

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/wire"
)

// Missed-tick policies: what a daemon does with ticks that came due while
// no daemon ran (more than Grace before it got to them).
const (
	// MissedLatest fires the most recent missed tick once, standing for
	// the outage, unless a tick reached on time fires anyway. The default.
	MissedLatest = "latest"
	// MissedSkip drops missed ticks; only ticks reached in time fire.
	MissedSkip = "skip"
	// MissedAll fires every missed tick, the most recent MaxCatchUp of them.
	MissedAll = "all"
)

// Targets: what a tick creates.
const (
	TargetExecution = wire.TargetExecution
	TargetFlow      = wire.TargetFlow
)

const (
	// Grace is how late a tick may be reached and still count as on time.
	Grace = time.Minute
	// MaxCatchUp bounds the ticks one pass fires (the most recent).
	MaxCatchUp = 100
	// maxScan bounds the ticks one plan walks (a one-second schedule after
	// a long outage); older ticks beyond it count as skipped.
	maxScan = 10000
)

// parser reads standard five-field specs, an optional leading seconds
// field, and descriptors (@hourly, @every 90s).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed schedule in its time zone.
type Spec struct {
	sched cron.Schedule
	loc   *time.Location
}

// DefaultTimezone is the zone a schedule's spec is read in when it names
// none.
const DefaultTimezone = "UTC"

// Parse checks a cron spec and an IANA time zone ("" is DefaultTimezone).
func Parse(spec, tz string) (*Spec, error) {
	if tz == "" {
		tz = DefaultTimezone
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "timezone", tz, "want an IANA time zone such as Europe/Paris")
	}
	s, err := parser.Parse(spec)
	if err != nil {
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "cron", spec, "want five fields (minute hour day month weekday), six with seconds first, or @hourly, @daily, @every 5m...: "+err.Error())
	}
	return &Spec{sched: s, loc: loc}, nil
}

// Next is the first tick strictly after t; the zero time when there is
// none within five years.
func (s *Spec) Next(t time.Time) time.Time { return s.sched.Next(t.In(s.loc)) }

// Plan says which ticks to fire when a schedule due at next is reached at
// now, under a missed-tick policy, and when it is next due: the zero time
// when it never is (a spec such as "0 0 30 2 *" matches no date).
func (s *Spec) Plan(next, now time.Time, missed string) (fire []time.Time, after time.Time) {
	var due []time.Time
	t := next
	for n := 0; !t.IsZero() && !t.After(now) && n < maxScan; n++ {
		due = append(due, t)
		t = s.Next(t)
	}
	if !t.IsZero() && !t.After(now) {
		t = s.Next(now) // more than maxScan ticks behind: the rest are skipped
	}
	if len(due) == 0 {
		return nil, t
	}
	// A tick reached within Grace of its time is on time and fires under
	// every policy; the policy decides only about the older, missed ones.
	var onTime []time.Time
	for i, d := range due {
		if now.Sub(d) <= Grace {
			onTime = due[i:] // due is in order: the rest are on time too
			break
		}
	}
	switch missed {
	case MissedAll:
		fire = due
	case MissedSkip:
		fire = onTime
	default:
		// One run stands for the outage: the most recent missed tick,
		// unless a tick on time fires anyway.
		fire = onTime
		if len(fire) == 0 {
			fire = due[len(due)-1:]
		}
	}
	if len(fire) > MaxCatchUp {
		fire = fire[len(fire)-MaxCatchUp:]
	}
	return fire, t
}

// ValidMissed checks a missed-tick policy ("" is MissedLatest).
func ValidMissed(m string) (string, error) {
	switch m {
	case "":
		return MissedLatest, nil
	case MissedLatest, MissedSkip, MissedAll:
		return m, nil
	}
	return "", fault.Invalid(ffdtype.KindInvalidValue, "missed", m, "want latest, skip or all")
}

// Key is the idempotency key of the execution a tick creates.
func Key(name string, tick time.Time) string {
	return fmt.Sprintf("ffd-schedule:%s:%s", name, tick.UTC().Format(time.RFC3339Nano))
}

// KeyPrefix is the prefix of every Key of a schedule.
func KeyPrefix(name string) string { return "ffd-schedule:" + name + ":" }
