package bound

import (
	"testing"
	"time"
)

// A default is spelled as a flag reads it, shortest first, and parses
// back to itself.
func TestFlagDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		168 * time.Hour: "168h", 2 * time.Minute: "2m", 10 * time.Second: "10s", time.Second: "1s",
		90 * time.Second: "1m30s", 500 * time.Millisecond: "500ms", time.Hour + time.Second: "1h0m1s",
	} {
		got := flagDuration(d)
		back, err := time.ParseDuration(got)
		if got != want || err != nil || back != d {
			t.Errorf("flagDuration(%v) = %q (parses to %v, %v); want %q", d, got, back, err, want)
		}
	}
}

// Every default lies in its own range: a setting left alone is never
// refused.
func TestDefaultsAreInRange(t *testing.T) {
	t.Parallel()
	for name, b := range map[string]Int{"CascadeWorkers": CascadeWorkers, "SiblingWorkers": SiblingWorkers, "QueueSize": QueueSize,
		"SweepBatch": SweepBatch, "PoolMaxConns": PoolMaxConns, "Concurrency": Concurrency, "ConsumerBatch": ConsumerBatch, "KeepaliveCount": KeepaliveCount} {
		if err := b.Check(name, b.Default); err != nil {
			t.Errorf("%s: default %d refused: %v", name, b.Default, err)
		}
	}
	for name, b := range map[string]Duration{"SweepInterval": SweepInterval, "ScheduleInterval": ScheduleInterval, "DispatchGrace": DispatchGrace,
		"StopTimeout": StopTimeout, "SampleInterval": SampleInterval, "StatisticsInterval": StatisticsInterval, "OutboxRetention": OutboxRetention,
		"ExecutionRetention": ExecutionRetention, "RetentionInterval": RetentionInterval, "ConsumerIdleLimit": ConsumerIdleLimit,
		"DispatchLockTimeout": DispatchLockTimeout, "PollInterval": PollInterval, "HandBackTimeout": HandBackTimeout,
		"CompletionLockTimeout": CompletionLockTimeout, "ConsumerPollInterval": ConsumerPollInterval, "MigrateLockWait": MigrateLockWait,
		"DemoTimeout": DemoTimeout, "IdleInTransactionTimeout": IdleInTransactionTimeout, "LockTimeout": LockTimeout,
		"KeepaliveIdle": KeepaliveIdle, "KeepaliveInterval": KeepaliveInterval, "ConnectTimeout": ConnectTimeout} {
		if err := b.Check(name, b.Default); err != nil || b.Default == 0 {
			t.Errorf("%s: default %v refused or unset: %v", name, b.Default, err)
		}
	}
}
