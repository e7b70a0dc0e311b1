package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Every out-of-range flag is refused before anything connects, naming the
// flag and the allowed range. The database URL points nowhere: a command
// that got as far as connecting would fail differently.
func TestFlagRangesAreRefusedUpFront(t *testing.T) {
	t.Parallel()
	nowhere := "--database-url=postgres://nobody@127.0.0.1:1/none?connect_timeout=1"
	cases := []struct {
		args []string
		flag string
		want string
	}{
		{[]string{"run", "--queue-size", "200000000"}, "--queue-size", "1..1000000"},
		{[]string{"run", "--queue-size", "0"}, "--queue-size", "1..1000000"},
		{[]string{"run", "--sweep-batch=-1"}, "--sweep-batch", "1..100000"},
		{[]string{"run", "--retention", "1s"}, "--retention", "or forever"},
		{[]string{"run", "--execution-retention", "1s"}, "--execution-retention", "or forever"},
		{[]string{"run", "--namespace-retention", "billing=1s"}, "--namespace-retention billing", "or forever"},
		// 0 meant forever here and means the default in the Go API: refused.
		{[]string{"run", "--retention", "0"}, "--retention", "write forever"},
		{[]string{"run", "--execution-retention", "0s"}, "--execution-retention", "write forever"},
		{[]string{"run", "--namespace-retention", "audit=0"}, "--namespace-retention", "write forever"},
		{[]string{"run", "--execution-retention", "always"}, "--execution-retention", "or forever"},
		{[]string{"run", "--namespace-retention", "bad name=1h"}, "--namespace-retention", "A-Z a-z 0-9"},
		{[]string{"run", "--consumer-idle-limit", "0s"}, "--consumer-idle-limit", "1s.."},
		{[]string{"dev", "--port", "70000"}, "--port", "0..65535"},
		{[]string{"dev", "--queue-size", "0"}, "--queue-size", "1..1000000"},
		{[]string{"demo", "--timeout", "0s"}, "--timeout", "1s.."},
		{[]string{"migrate", "up", "--lock-wait", "0s"}, "--lock-wait", "1s.."},
		{[]string{"exec", "list", "--limit", "99999999999"}, "--limit", "1..1000"},
		{[]string{"exec", "list", "--limit=-5"}, "--limit", "1..1000"},
		{[]string{"exec", "list", "--limit", "0"}, "--limit", "1..1000"},
		{[]string{"flow", "list", "--limit", "1001"}, "--limit", "1..1000"},
		{[]string{"events", "tail", "--poll-interval", "0s"}, "--poll-interval", "10ms..1h"},
		{[]string{"events", "tail", "--poll-interval=-1s"}, "--poll-interval", "10ms..1h"},
		{[]string{"events", "tail", "--limit=-1"}, "--limit", "0.."},
		{[]string{"bench", "--scenario", "chain", "--chain-length", "1"}, "--chain-length", "2.."},
		{[]string{"bench", "--scenario", "recovery", "--lease-ttl", "10ms"}, "--lease-ttl", "1s.."},
		{[]string{"run", "--idle-in-transaction-timeout", "1ms"}, "--idle-in-transaction-timeout", "100ms.."},
		{[]string{"run", "--lock-timeout=-1s"}, "--lock-timeout", "10ms.."},
		{[]string{"exec", "list", "--tcp-keepalive-count", "1000"}, "--tcp-keepalive-count", "0..100"},
	}
	for _, c := range cases {
		code, _, errOut := runFFD(t, append(c.args, nowhere)...)
		if code == 0 || !strings.Contains(errOut, c.flag) || !strings.Contains(errOut, c.want) {
			t.Errorf("ffd %s: exit %d, stderr %q; want a refusal naming %s and %q", strings.Join(c.args, " "), code, errOut, c.flag, c.want)
		}
		if strings.Contains(errOut, "connect") {
			t.Errorf("ffd %s: got as far as connecting: %q", strings.Join(c.args, " "), errOut)
		}
	}
}

// The CLI's extremes are the library's: a daemon configured with every
// flag at its bound is accepted, and one past it is refused naming the
// setting.
func TestDaemonAcceptsTheCLIBounds(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	for _, pick := range []func(bound.Int) int{func(b bound.Int) int { return b.Min }, func(b bound.Int) int { return b.Max }} {
		f := DaemonFlags{
			PoolMaxConns: int32(pick(bound.PoolMaxConns)), CascadeWorkers: pick(bound.CascadeWorkers),
			SiblingWorkers: pick(bound.SiblingWorkers), QueueSize: pick(bound.QueueSize), SweepBatch: pick(bound.SweepBatch),
			SweepInterval: bound.SweepInterval.Max, StopTimeout: bound.StopTimeout.Min, Retention: retention{age: bound.OutboxRetention.Max},
			ExecutionRetention: retention{keep: true}, NamespaceRetention: namespaceRetentions{"audit": {keep: true}, "scratch": {age: bound.OutboxRetention.Min}},
			ConsumerIdle: bound.ConsumerIdleLimit.Max,
		}
		if err := f.Validate(); err != nil {
			t.Fatalf("flags at their bounds refused by the CLI: %v", err)
		}
		cfg, pool, err := f.config(context.Background(), &Globals{}, db.URL)
		if err != nil {
			t.Fatal(err)
		}
		// forever reaches the daemon as its "keep" (0); ages as they are.
		if cfg.Retention != bound.OutboxRetention.Max || cfg.ExecutionRetention != 0 ||
			cfg.NamespaceRetention["audit"] != 0 || cfg.NamespaceRetention["scratch"] != bound.OutboxRetention.Min {
			t.Errorf("retentions reached the daemon as %v, %v, %v; want %v, 0 (forever), audit 0 and scratch %v",
				cfg.Retention, cfg.ExecutionRetention, cfg.NamespaceRetention, bound.OutboxRetention.Max, bound.OutboxRetention.Min)
		}
		if _, err := daemon.New(cfg); err != nil {
			t.Errorf("the daemon refused flags the CLI accepts: %v", err)
		}
		pool.Close()
	}
	cfg, pool, err := (&DaemonFlags{PoolMaxConns: 4, CascadeWorkers: 1, SiblingWorkers: 1, QueueSize: 1, SweepBatch: 1,
		SweepInterval: bound.SweepInterval.Min, StopTimeout: bound.StopTimeout.Min, ConsumerIdle: bound.ConsumerIdleLimit.Min}).config(context.Background(), &Globals{}, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	cfg.QueueSize = bound.QueueSize.Max + 1
	if _, err := daemon.New(cfg); err == nil || !strings.Contains(err.Error(), "QueueSize") || !strings.Contains(err.Error(), fmt.Sprint(bound.QueueSize.Max)) {
		t.Errorf("QueueSize past the bound: want a refusal naming QueueSize and the range, got %v", err)
	}
}

// A flag left alone takes the library's default, not one of its own:
// `ffd run` and `ffd migrate` with no flags configure what a program
// that leaves every Config field zero gets.
func TestFlagDefaultsAreTheLibrarys(t *testing.T) {
	t.Parallel()
	var cli CLI
	parser, err := kong.New(&cli, flagVars())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parser.Parse([]string{"run"}); err != nil {
		t.Fatal(err)
	}
	g, f := cli.Globals, cli.Run.DaemonFlags
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"--cascade-workers", f.CascadeWorkers, daemon.DefaultCascadeWorkers},
		{"--sibling-workers", f.SiblingWorkers, daemon.DefaultSiblingWorkers},
		{"--queue-size", f.QueueSize, daemon.DefaultQueueSize},
		{"--sweep-batch", f.SweepBatch, daemon.DefaultSweepBatch},
		{"--sweep-interval", f.SweepInterval, time.Duration(daemon.DefaultSweepInterval)},
		{"--stop-timeout", f.StopTimeout, time.Duration(daemon.DefaultStopTimeout)},
		{"--retention", f.Retention.age, time.Duration(daemon.DefaultOutboxRetention)},
		{"--execution-retention", f.ExecutionRetention.age, time.Duration(daemon.DefaultExecutionRetention)},
		{"--consumer-idle-limit", f.ConsumerIdle, time.Duration(outbox.DefaultIdleConsumerAge)},
		{"--pool-max-conns", int(f.PoolMaxConns), bound.DefaultPoolMaxConns},
		{"--idle-in-transaction-timeout", g.IdleInTxTimeout, time.Duration(session.DefaultIdleInTransactionTimeout)},
		{"--lock-timeout", g.LockTimeout, time.Duration(session.DefaultLockTimeout)},
		{"--tcp-keepalive-idle", g.KeepaliveIdle, time.Duration(session.DefaultKeepaliveIdle)},
		{"--tcp-keepalive-interval", g.KeepaliveInterval, time.Duration(session.DefaultKeepaliveInterval)},
		{"--tcp-keepalive-count", g.KeepaliveCount, session.DefaultKeepaliveCount},
		{"--connect-timeout", g.ConnectTimeout, time.Duration(session.DefaultConnectTimeout)},
	} {
		if c.got != c.want {
			t.Errorf("%s defaults to %v; want the library's %v", c.name, c.got, c.want)
		}
	}
	if _, err := parser.Parse([]string{"migrate", "up"}); err != nil {
		t.Fatal(err)
	}
	if cli.Migrate.Up.LockWait != bound.DefaultMigrateLockWait {
		t.Errorf("migrate --lock-wait defaults to %v; want %v", cli.Migrate.Up.LockWait, bound.DefaultMigrateLockWait)
	}
}
