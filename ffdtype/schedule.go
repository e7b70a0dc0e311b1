package ffdtype

import "time"

// MissedPolicy is what the daemon does with ticks that came due while no
// daemon ran.
type MissedPolicy string

// Missed-tick policies. A tick the daemon reaches within a minute of its
// time is on time and always fires; the policy decides about older ones.
const (
	// MissedLatest fires the most recent due tick once, standing for
	// every tick missed. The default.
	MissedLatest MissedPolicy = "latest"
	// MissedSkip drops missed ticks.
	MissedSkip MissedPolicy = "skip"
	// MissedAll fires every missed tick, the latest 100 at most per pass.
	MissedAll MissedPolicy = "all"
)

// Schedule is a stored schedule.
type Schedule struct {
	// Name, Namespace, Cron, Timezone and Missed are as created.
	Name      string
	Namespace string
	Cron      string
	Timezone  string
	Missed    MissedPolicy
	// Target is "execution" or "flow".
	Target string
	// Paused schedules fire nothing.
	Paused bool
	// NextRunAt is its next tick.
	NextRunAt time.Time
	// LastRunAt is when it last fired; nil before.
	LastRunAt *time.Time
	// Fired counts the ticks it fired.
	Fired int64
	// CreatedAt is its creation time.
	CreatedAt time.Time
}
