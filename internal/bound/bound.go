// Package bound holds the allowed range of every numeric setting ffd
// takes, once. The library checks its configuration structs against these
// ranges and the CLI checks its flags against the same values before it
// connects to anything, so a value the CLI accepts is never refused later
// by the component it configures, and every refusal names the setting as
// the caller spelled it (a Go field or a flag) with the range.
package bound

import (
	"fmt"
	"strconv"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// Int is an inclusive integer range.
type Int struct{ Min, Max int }

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

// Fill checks *v (0 allowed) and replaces 0 with def: the pattern of every
// config field whose zero value means "the default".
func (b Int) Fill(name string, v *int, def int) error {
	if err := b.CheckOrZero(name, *v); err != nil {
		return err
	}
	if *v == 0 {
		*v = def
	}
	return nil
}

// Duration is an inclusive duration range. Off, when set, also allows 0
// with that meaning (for example "disabled").
type Duration struct {
	Min, Max time.Duration
	Off      string
}

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

// Fill checks *d (0 allowed) and replaces 0 with def.
func (b Duration) Fill(name string, d *time.Duration, def time.Duration) error {
	if err := b.CheckOrZero(name, *d); err != nil {
		return err
	}
	if *d == 0 {
		*d = def
	}
	return nil
}

// The ranges. Each setting has one, whoever checks it.
var (
	// Daemon.
	CascadeWorkers = Int{1, 1000}
	SiblingWorkers = Int{1, 1000}
	QueueSize      = Int{1, 1_000_000}
	SweepBatch     = Int{1, 100_000}
	PoolMaxConns   = Int{2, 1000}
	// CLI commands other than the daemon (0: the URL's or pgx's default).
	CommandMaxConns   = Int{0, 1000}
	SweepInterval     = Duration{Min: 10 * time.Millisecond, Max: time.Hour}
	DispatchGrace     = Duration{Min: time.Millisecond, Max: time.Hour}
	StopTimeout       = Duration{Min: 100 * time.Millisecond, Max: time.Hour}
	SampleInterval    = Duration{Min: 100 * time.Millisecond, Max: 24 * time.Hour}
	Retention         = Duration{Min: time.Minute, Max: 10 * 365 * 24 * time.Hour, Off: "keep events forever"}
	RetentionInterval = Duration{Min: 10 * time.Millisecond, Max: 24 * time.Hour}
	ConsumerIdleLimit = Duration{Min: time.Second, Max: 365 * 24 * time.Hour}

	// Worker.
	Concurrency      = Int{1, 10_000}
	PollInterval     = Duration{Min: 10 * time.Millisecond, Max: time.Hour}
	HandBackTimeout  = Duration{Min: 10 * time.Millisecond, Max: 10 * time.Minute}
	CompletionBatch  = Int{1, 10_000}
	ListLimit        = Int{1, MaxListLimit}
	ConsumerBatch    = Int{1, 10_000}
	EventLimit       = Int{0, 1_000_000_000}
	MigrateLockWait  = Duration{Min: time.Second, Max: 24 * time.Hour}
	DevPort          = Int{0, 65535}
	DemoTimeout      = Duration{Min: time.Second, Max: 24 * time.Hour}
	BenchCount       = Int{1, 10_000_000}
	BenchChainLength = Int{2, 10_000}

	// Sessions: every ffd connection (internal/session).
	IdleInTransactionTimeout = Duration{Min: 100 * time.Millisecond, Max: 24 * time.Hour, Off: "no limit"}
	LockTimeout              = Duration{Min: 10 * time.Millisecond, Max: time.Hour, Off: "wait forever"}
	KeepaliveIdle            = Duration{Min: time.Second, Max: 2 * time.Hour, Off: "the operating system's default"}
	KeepaliveInterval        = Duration{Min: time.Second, Max: 10 * time.Minute, Off: "the operating system's default"}
	KeepaliveCount           = Int{0, 100}
	ConnectTimeout           = Duration{Min: 100 * time.Millisecond, Max: 10 * time.Minute, Off: "no limit"}
)
