// Package bound holds every numeric setting ffd takes, once: its allowed
// range and its default. The library checks its configuration structs
// against these ranges and fills their zero values with these defaults;
// the CLI takes its flags' defaults from here (Vars) and checks its flags
// against the same ranges before it connects to anything. So a value the
// CLI accepts is never refused later by the component it configures, the
// CLI's default is the library's, and every refusal names the setting as
// the caller spelled it (a Go field or a flag) with the range.
package bound

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// Int is an inclusive integer range and the setting's default.
type Int struct{ Min, Max, Default int }

// With is the range with another default, for a setting that shares the
// range of another.
func (b Int) With(def int) Int { b.Default = def; return b }

// Check refuses v outside the range, naming it as name.
func (b Int) Check(name string, v int) error {
	if v < b.Min || v > b.Max {
		return fault.Invalid(ffdtype.KindOutOfRange, name, strconv.Itoa(v), fmt.Sprintf("want %d..%d", b.Min, b.Max))
	}
	return nil
}

// CheckOrZero is Check that also lets 0 through (0: "use the default").
func (b Int) CheckOrZero(name string, v int) error {
	if v == 0 {
		return nil
	}
	if err := b.Check(name, v); err != nil {
		return fault.Invalid(ffdtype.KindOutOfRange, name, strconv.Itoa(v), fmt.Sprintf("want %d..%d (0 for the default)", b.Min, b.Max))
	}
	return nil
}

// Fill checks *v (0 allowed) and replaces 0 with the default: the
// pattern of every config field whose zero value means "the default".
func (b Int) Fill(name string, v *int) error {
	if err := b.CheckOrZero(name, *v); err != nil {
		return err
	}
	if *v == 0 {
		*v = b.Default
	}
	return nil
}

// Duration is an inclusive duration range and the setting's default.
// Off, when set, also allows 0 with that meaning (for example
// "disabled").
type Duration struct {
	Min, Max, Default time.Duration
	Off               string
}

// With is the range with another default, for a setting that shares the
// range of another.
func (b Duration) With(def time.Duration) Duration { b.Default = def; return b }

// Check refuses d outside the range (0 is allowed only when Off is set).
func (b Duration) Check(name string, d time.Duration) error {
	if d == 0 && b.Off != "" {
		return nil
	}
	if d < b.Min || d > b.Max {
		want := fmt.Sprintf("want %s..%s", b.Min, b.Max)
		if b.Off != "" {
			want += fmt.Sprintf(", or 0 (%s)", b.Off)
		}
		return fault.Invalid(ffdtype.KindOutOfRange, name, d.String(), want)
	}
	return nil
}

// CheckOrZero is Check that also lets 0 through (0: "use the default").
func (b Duration) CheckOrZero(name string, d time.Duration) error {
	if d == 0 {
		return nil
	}
	if err := b.Check(name, d); err != nil {
		return fault.Invalid(ffdtype.KindOutOfRange, name, d.String(), fmt.Sprintf("want %s..%s (0 for the default)", b.Min, b.Max))
	}
	return nil
}

// MaxListLimit is the largest page a list call returns.
const MaxListLimit = 1000

// Fill checks *d (0 allowed) and replaces 0 with the default.
func (b Duration) Fill(name string, d *time.Duration) error {
	if err := b.CheckOrZero(name, *d); err != nil {
		return err
	}
	if *d == 0 {
		*d = b.Default
	}
	return nil
}

// Defaults, as constants for the packages that re-export them (the
// daemon's, a worker's, a session's); the ranges below carry them.
const (
	DefaultCascadeWorkers      = 4
	DefaultSiblingWorkers      = 1
	DefaultQueueSize           = 10000
	DefaultSweepBatch          = 500
	DefaultPoolMaxConns        = 10
	DefaultSweepInterval       = time.Second
	DefaultDispatchGrace       = 500 * time.Millisecond
	DefaultDispatchLockTimeout = 2 * time.Second
	DefaultStopTimeout         = 30 * time.Second
	DefaultSampleInterval      = 15 * time.Second
	DefaultStatisticsInterval  = 2 * time.Second
	DefaultRetentionInterval   = time.Minute
	DefaultScheduleInterval    = time.Second
	DefaultConsumerIdleLimit   = 24 * time.Hour
	DefaultOutboxRetention     = 7 * 24 * time.Hour
	DefaultExecutionRetention  = 30 * 24 * time.Hour

	DefaultConcurrency           = 10
	DefaultPollInterval          = time.Second
	DefaultHandBackTimeout       = 2 * time.Second
	DefaultCompletionLockTimeout = 2 * time.Second

	DefaultIdleInTransactionTimeout = 15 * time.Second
	DefaultLockTimeout              = 10 * time.Second
	DefaultKeepaliveIdle            = 15 * time.Second
	DefaultKeepaliveInterval        = 5 * time.Second
	DefaultKeepaliveCount           = 3
	DefaultConnectTimeout           = 10 * time.Second

	DefaultConsumerBatch        = 100
	DefaultConsumerPollInterval = time.Second

	DefaultMigrateLockWait = 10 * time.Minute
	DefaultDemoTimeout     = 10 * time.Minute
)

// The settings. Each has one range and one default, whoever checks it.
var (
	// Daemon.
	CascadeWorkers = Int{1, 1000, DefaultCascadeWorkers}
	SiblingWorkers = Int{1, 1000, DefaultSiblingWorkers}
	QueueSize      = Int{1, 1_000_000, DefaultQueueSize}
	SweepBatch     = Int{1, 100_000, DefaultSweepBatch}
	PoolMaxConns   = Int{2, 1000, DefaultPoolMaxConns}
	// CLI commands other than the daemon (0: the URL's or pgx's default).
	CommandMaxConns     = Int{0, 1000, 0}
	SweepInterval       = Duration{Min: 10 * time.Millisecond, Max: time.Hour, Default: DefaultSweepInterval}
	ScheduleInterval    = SweepInterval.With(DefaultScheduleInterval)
	DispatchGrace       = Duration{Min: time.Millisecond, Max: time.Hour, Default: DefaultDispatchGrace}
	StopTimeout         = Duration{Min: 100 * time.Millisecond, Max: time.Hour, Default: DefaultStopTimeout}
	SampleInterval      = Duration{Min: 100 * time.Millisecond, Max: 24 * time.Hour, Default: DefaultSampleInterval}
	StatisticsInterval  = SampleInterval.With(DefaultStatisticsInterval)
	OutboxRetention     = Duration{Min: time.Minute, Max: 10 * 365 * 24 * time.Hour, Default: DefaultOutboxRetention, Off: "keep events forever"}
	ExecutionRetention  = OutboxRetention.With(DefaultExecutionRetention)
	RetentionInterval   = Duration{Min: 10 * time.Millisecond, Max: 24 * time.Hour, Default: DefaultRetentionInterval}
	ConsumerIdleLimit   = Duration{Min: time.Second, Max: 365 * 24 * time.Hour, Default: DefaultConsumerIdleLimit}
	DispatchLockTimeout = LockTimeout.With(DefaultDispatchLockTimeout)

	// Worker.
	Concurrency           = Int{1, 10_000, DefaultConcurrency}
	PollInterval          = Duration{Min: 10 * time.Millisecond, Max: time.Hour, Default: DefaultPollInterval}
	HandBackTimeout       = Duration{Min: 10 * time.Millisecond, Max: 10 * time.Minute, Default: DefaultHandBackTimeout}
	CompletionLockTimeout = LockTimeout.With(DefaultCompletionLockTimeout)
	CompletionBatch       = Int{1, 10_000, 0}
	ListLimit             = Int{1, MaxListLimit, 0}
	ConsumerBatch         = Int{1, 10_000, DefaultConsumerBatch}
	ConsumerPollInterval  = PollInterval.With(DefaultConsumerPollInterval)
	EventLimit            = Int{0, 1_000_000_000, 0}
	MigrateLockWait       = Duration{Min: time.Second, Max: 24 * time.Hour, Default: DefaultMigrateLockWait}
	DevPort               = Int{0, 65535, 0}
	DemoTimeout           = Duration{Min: time.Second, Max: 24 * time.Hour, Default: DefaultDemoTimeout}
	BenchCount            = Int{1, 10_000_000, 0}
	BenchChainLength      = Int{2, 10_000, 0}

	// Sessions: every ffd connection (internal/session).
	IdleInTransactionTimeout = Duration{Min: 100 * time.Millisecond, Max: 24 * time.Hour, Default: DefaultIdleInTransactionTimeout, Off: "no limit"}
	LockTimeout              = Duration{Min: 10 * time.Millisecond, Max: time.Hour, Default: DefaultLockTimeout, Off: "wait forever"}
	KeepaliveIdle            = Duration{Min: time.Second, Max: 2 * time.Hour, Default: DefaultKeepaliveIdle, Off: "the operating system's default"}
	KeepaliveInterval        = Duration{Min: time.Second, Max: 10 * time.Minute, Default: DefaultKeepaliveInterval, Off: "the operating system's default"}
	KeepaliveCount           = Int{0, 100, DefaultKeepaliveCount}
	ConnectTimeout           = Duration{Min: 100 * time.Millisecond, Max: 10 * time.Minute, Default: DefaultConnectTimeout, Off: "no limit"}
)

// Vars are the CLI's flag defaults, by the name a flag's `default:"${name}"`
// tag gives (kong.Vars): the defaults above, spelled as flags read them.
func Vars() map[string]string {
	d := func(b Duration) string { return flagDuration(b.Default) }
	n := func(b Int) string { return strconv.Itoa(b.Default) }
	return map[string]string{
		"cascade_workers":             n(CascadeWorkers),
		"sibling_workers":             n(SiblingWorkers),
		"queue_size":                  n(QueueSize),
		"sweep_batch":                 n(SweepBatch),
		"pool_max_conns":              n(PoolMaxConns),
		"sweep_interval":              d(SweepInterval),
		"stop_timeout":                d(StopTimeout),
		"outbox_retention":            d(OutboxRetention),
		"execution_retention":         d(ExecutionRetention),
		"consumer_idle_limit":         d(ConsumerIdleLimit),
		"idle_in_transaction_timeout": d(IdleInTransactionTimeout),
		"lock_timeout":                d(LockTimeout),
		"keepalive_idle":              d(KeepaliveIdle),
		"keepalive_interval":          d(KeepaliveInterval),
		"keepalive_count":             n(KeepaliveCount),
		"connect_timeout":             d(ConnectTimeout),
		"migrate_lock_wait":           d(MigrateLockWait),
		"demo_timeout":                d(DemoTimeout),
		"consumer_poll_interval":      d(ConsumerPollInterval),
	}
}

// flagDuration spells d as a person would type it: 168h, not 168h0m0s.
func flagDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
