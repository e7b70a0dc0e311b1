// Command ffd is the ffd daemon and its tools: migrations, a private
// development Postgres, and (in later commands) the daemon itself, ops
// queries, the outbox tail and benchmarks.
//
// Every setting is a flag with an FFD_ environment variable; `ffd --help`
// and `ffd COMMAND --help` list them.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/willabides/kongplete"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/bench"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/logging"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/schedule"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/version"
)

// Globals are the settings every command shares.
type Globals struct {
	DatabaseURL string `name:"database-url" env:"FFD_DATABASE_URL" help:"PostgreSQL connection URL (or key=value DSN)."`
	LogLevel    string `name:"log-level" env:"FFD_LOG_LEVEL" default:"auto" enum:"auto,debug,info,warn,error" help:"Log level: debug, info, warn or error; auto is info, and warn for demo (its report is the output)."`
	LogFormat   string `name:"log-format" env:"FFD_LOG_FORMAT" default:"auto" enum:"auto,json,console" help:"Log format: json, console, or auto (console on a terminal, else json)."`

	// The session guard of every connection (internal/session).
	IdleInTxTimeout   time.Duration `name:"idle-in-transaction-timeout" env:"FFD_IDLE_IN_TRANSACTION_TIMEOUT" default:"${idle_in_transaction_timeout}" help:"The server disconnects an ffd session idle inside a transaction this long, releasing its locks (0: never)."`
	LockTimeout       time.Duration `name:"lock-timeout" env:"FFD_LOCK_TIMEOUT" default:"${lock_timeout}" help:"Longest wait of one statement for a lock (0: forever)."`
	KeepaliveIdle     time.Duration `name:"tcp-keepalive-idle" env:"FFD_TCP_KEEPALIVE_IDLE" default:"${keepalive_idle}" help:"Silence before the first TCP keepalive probe, both ends (0: the OS default)."`
	KeepaliveInterval time.Duration `name:"tcp-keepalive-interval" env:"FFD_TCP_KEEPALIVE_INTERVAL" default:"${keepalive_interval}" help:"Time between TCP keepalive probes (0: the OS default)."`
	KeepaliveCount    int           `name:"tcp-keepalive-count" env:"FFD_TCP_KEEPALIVE_COUNT" default:"${keepalive_count}" help:"Unanswered probes that end a connection (0: the OS default)."`
	ConnectTimeout    time.Duration `name:"connect-timeout" env:"FFD_CONNECT_TIMEOUT" default:"${connect_timeout}" help:"Longest wait to establish a connection (0: none)."`

	// The connection budget of a command (ffd run has --pool-max-conns).
	MaxConns int32 `name:"max-conns" env:"FFD_MAX_CONNS" default:"0" help:"Most pooled connections of a command other than run (console, events tail, exec, flow...); 0: pool_max_conns in the URL, else pgx's default (the larger of 4 and the CPU count)."`

	stdout io.Writer
	log    *zap.Logger
	closes []func() // what the command opened for its run (g.client's pool)
	// autoLevel: the log level is the command's default, not one asked for.
	autoLevel bool
}

// close releases what the command opened, last opened first.
func (g *Globals) close() {
	for i := len(g.closes) - 1; i >= 0; i-- {
		g.closes[i]()
	}
	g.closes = nil
}

// CLI is the whole command line.
type CLI struct {
	Globals
	Version kong.VersionFlag `name:"version" help:"Print the version and exit."`

	Run      RunCmd      `cmd:"" aliases:"daemon" help:"Run the daemon: cascade, sibling cancellation, timeouts, sweep (alias: daemon)."`
	Migrate  MigrateCmd  `cmd:"" help:"Apply or inspect the schema migrations."`
	Exec     ExecCmd     `cmd:"" help:"Inspect and cancel executions."`
	Flow     FlowCmd     `cmd:"" help:"Inspect and cancel flows."`
	Dead     DeadCmd     `cmd:"" help:"List dead letters and rerun them in bulk."`
	Events   EventsCmd   `cmd:"" help:"Read the outbox: tail events, manage consumers and WAL slots."`
	Schedule ScheduleCmd `cmd:"" help:"Create, list, pause, resume and delete schedules."`
	Trigger  TriggerCmd  `cmd:"" help:"Start executions or flows from published events: triggers, and events to publish."`
	Lane     LaneCmd     `cmd:"" help:"Pause, resume and cap lanes."`
	Versions VersionsCmd `cmd:"" help:"List and announce the versions of handler sets that workers serve."`
	Console  ConsoleCmd  `cmd:"" help:"Serve the web console: flows as live graphs, executions, lanes, consumers."`
	Dev      DevCmd      `cmd:"" help:"Run a private PostgreSQL and the daemon for development until interrupted."`
	Demo     DemoCmd     `cmd:"" help:"Run a realistic DAG end to end on a private PostgreSQL and report."`
	Bench    BenchCmd    `cmd:"" help:"Measure ffd on the anchor scenarios (docs/benchmarks.md)."`
	// BenchChild is a process `ffd bench --scenario memory` starts, not
	// a command for people.
	BenchChild BenchChildCmd `cmd:"" name:"bench-child" hidden:""`
	Ver        VersionCmd    `cmd:"" name:"version" help:"Print the version, commit and platform of this build."`

	Completion CompletionCmd `cmd:"" help:"Print shell completion code: eval \"$(ffd completion bash)\" (docs/operations.md)."`
}

// errNoDatabase is returned by commands that need a database when none is
// configured.
var errNoDatabase = errors.New("no database configured: pass --database-url or set FFD_DATABASE_URL")

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// flagVars are what flags' `default:"${name}"` tags read: every setting's
// default as internal/bound holds it (the library's own), so the CLI
// never spells a default of its own.
func flagVars() kong.Vars {
	v := kong.Vars{
		"dev_port": strconv.Itoa(DefaultDevPort), "version": version.Get().String(),
		"admin_addr": daemon.DefaultAdminAddr, "outbox_stream": string(ffdtype.StreamAll),
		"schedule_timezone": schedule.DefaultTimezone, "schedule_missed": schedule.MissedLatest,
	}
	for _, vars := range []map[string]string{bound.Vars(), bench.Vars()} {
		for name, def := range vars {
			v[name] = def
		}
	}
	return v
}

// run parses args and runs the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var cli CLI
	exitCode := -1
	parser, err := kong.New(&cli,
		kong.Name("ffd"),
		kong.Description("ffd: a Postgres-native engine for durable work that runs as DAGs."),
		kong.Writers(stdout, stderr),
		kong.Help(help),
		kong.Exit(func(code int) { exitCode = code; panic(exitSentinel{}) }),
		kong.BindTo(ctx, (*context.Context)(nil)),
		flagVars(),
	)
	if err != nil {
		fmt.Fprintln(stderr, "ffd:", err)
		return exitBadArgs
	}
	if os.Getenv("COMP_LINE") != "" {
		// The shell asks for completions (ffd completion): answer on
		// stdout and end, without running anything.
		return complete(parser, &exitCode)
	}
	kctx, code, done := parse(parser, args, &exitCode, stderr)
	if done {
		return code
	}
	if cli.autoLevel = cli.LogLevel == "auto"; cli.autoLevel {
		cli.LogLevel = "info"
		if strings.HasPrefix(kctx.Command(), "demo") {
			cli.LogLevel = "warn"
		}
	}
	log, err := logging.New(stderr, cli.LogLevel, cli.LogFormat)
	if err != nil {
		return usageError(stderr, err, kctx.Command())
	}
	defer log.Sync() //nolint:errcheck // stderr sync errors are not actionable
	cli.stdout, cli.log = stdout, log
	defer cli.close()
	if err := kctx.Run(&cli.Globals); err != nil {
		code := codeOf(err)
		if code == exitBadArgs {
			return usageError(stderr, err, kctx.Command())
		}
		fmt.Fprintln(stderr, "ffd:", err)
		return code
	}
	return exitOK
}

type exitSentinel struct{}

// complete answers a shell's completion request (COMP_LINE) from the
// command model.
func complete(parser *kong.Kong, exitCode *int) int {
	code, _ := catchExit(exitCode, func() {
		kongplete.Complete(parser, kongplete.WithExitFunc(func(c int) { *exitCode = c; panic(exitSentinel{}) }))
	})
	return code
}

// catchExit runs f, turning kong's exit (an exitSentinel panic, see
// kong.Exit in run) into a return: exited is true, with the code kong
// asked for.
func catchExit(exitCode *int, f func()) (code int, exited bool) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(exitSentinel); !ok {
				panic(r)
			}
			code, exited = *exitCode, true
		}
	}()
	f()
	return exitOK, false
}

// parse turns kong's exit-on-help/error into a return value so that run can
// be called from tests.
func parse(parser *kong.Kong, args []string, exitCode *int, stderr io.Writer) (kctx *kong.Context, code int, done bool) {
	var err error
	if code, exited := catchExit(exitCode, func() { kctx, err = parser.Parse(args) }); exited {
		return nil, code, true
	}
	if err != nil {
		command := ""
		var pe *kong.ParseError
		if errors.As(err, &pe) && pe.Context != nil {
			command = pe.Context.Command()
		}
		return nil, usageError(stderr, err, command), true
	}
	return kctx, 0, false
}

// Validate checks the session flags (kong calls it after parsing, before
// any command runs).
func (g *Globals) Validate() error {
	return firstError(
		bound.IdleInTransactionTimeout.Check("--idle-in-transaction-timeout", g.IdleInTxTimeout),
		bound.LockTimeout.Check("--lock-timeout", g.LockTimeout),
		bound.KeepaliveIdle.Check("--tcp-keepalive-idle", g.KeepaliveIdle),
		bound.KeepaliveInterval.Check("--tcp-keepalive-interval", g.KeepaliveInterval),
		bound.KeepaliveCount.Check("--tcp-keepalive-count", g.KeepaliveCount),
		bound.ConnectTimeout.Check("--connect-timeout", g.ConnectTimeout),
		bound.CommandMaxConns.Check("--max-conns", int(g.MaxConns)),
	)
}

// session is the guard every connection of this command carries.
func (g *Globals) session() ffdtype.SessionConfig {
	return ffdtype.SessionConfig{
		IdleInTransactionTimeout: g.IdleInTxTimeout, LockTimeout: g.LockTimeout,
		KeepaliveIdle: g.KeepaliveIdle, KeepaliveInterval: g.KeepaliveInterval, KeepaliveCount: g.KeepaliveCount,
		ConnectTimeout: g.ConnectTimeout,
	}
}

// poolConfig parses url into a pool configuration carrying the session
// guard and naming the command in pg_stat_activity.
func (g *Globals) poolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, badArg("--database-url: %w (want postgres://user:password@host:5432/database or key=value pairs)", err)
	}
	session.ApplyPool(g.session(), cfg)
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "ffd"
	}
	return cfg, nil
}

// pool connects to the configured database.
func (g *Globals) pool(ctx context.Context) (*pgxpool.Pool, error) {
	if g.DatabaseURL == "" {
		return nil, errNoDatabase
	}
	cfg, err := g.poolConfig(g.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if g.MaxConns > 0 {
		cfg.MaxConns = g.MaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// waitedPool is checkedPool for a command that runs until interrupted:
// while the database is unreachable or restarting (a transient error) it
// waits and retries with backoff instead of exiting, so that a service
// started before its database, or restarted while it crash-restarts, comes
// up with it rather than exhausting its supervisor's restart limit.
// Permanent errors (credentials, a missing database, a schema this binary
// does not match) end it at once. It returns nil, nil when ctx ends first.
func (g *Globals) waitedPool(ctx context.Context) (*pgxpool.Pool, error) {
	var pool *pgxpool.Pool
	err := outbox.RetryTransient(ctx, g.log, "database unavailable; waiting for it", func() (err error) {
		pool, err = g.checkedPool(ctx)
		return err
	})
	if ctx.Err() != nil {
		return nil, nil
	}
	return pool, err
}

// checkedPool connects and refuses a schema this binary does not match;
// every command except `migrate` uses it.
func (g *Globals) checkedPool(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := g.pool(ctx)
	if err != nil {
		return nil, err
	}
	if err := schema.Check(ctx, pool); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}
