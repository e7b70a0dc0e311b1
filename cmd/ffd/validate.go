package main

import (
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/leases"
)

// Every command's flags are checked here against internal/bound, the same
// ranges the library enforces, so that a value is refused up front, with
// the flag's name and the allowed range, before anything connects. kong
// calls Validate on each command after parsing.

// Validate checks dev's flags and the daemon's.
func (c *DevCmd) Validate() error {
	return firstError(bound.DevPort.Check("--port", c.Port), c.DaemonFlags.Validate())
}

// Validate checks demo's flags.
func (c *DemoCmd) Validate() error { return bound.DemoTimeout.Check("--timeout", c.Timeout) }

// Validate checks migrate up's flags.
func (c *MigrateUpCmd) Validate() error {
	return bound.MigrateLockWait.Check("--lock-wait", c.LockWait)
}

// Validate checks the page size.
func (c *ExecListCmd) Validate() error { return bound.ListLimit.Check("--limit", c.Limit) }

// Validate checks the page size.
func (c *FlowListCmd) Validate() error { return bound.ListLimit.Check("--limit", c.Limit) }

// Validate checks tail's flags.
func (c *EventsTailCmd) Validate() error {
	return firstError(bound.EventLimit.Check("--limit", c.Limit), bound.PollInterval.Check("--poll-interval", c.Poll))
}

// Validate checks bench's flags.
func (c *BenchCmd) Validate() error {
	errs := []error{
		bound.BenchCount.Check("--executions", c.Executions),
		bound.BenchCount.Check("--workers", c.Workers),
		bound.BenchCount.Check("--flows", c.Flows),
		bound.BenchChainLength.Check("--chain-length", c.ChainLength),
		bound.BenchCount.Check("--chain-workers", c.ChainWorkers),
		bound.BenchCount.Check("--fan-width", c.FanWidth),
		bound.BenchCount.Check("--repeats", c.Repeats),
		bound.BenchCount.Check("--leases", c.Leases),
		bound.BenchCount.Check("--burst", c.Burst),
		bound.Concurrency.Check("--cancels", c.Cancels),
		bound.SweepInterval.Check("--sweep-interval", c.SweepInterval),
		bound.Duration{Min: leases.MinLeaseTTL, Max: leases.MaxLeaseTTL}.Check("--lease-ttl", c.LeaseTTL),
	}
	for _, n := range c.FlowSizes {
		errs = append(errs, bound.BenchCount.Check("--flow-sizes", n))
	}
	return firstError(errs...)
}
