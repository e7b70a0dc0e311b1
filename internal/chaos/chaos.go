//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/pgserver"
)

// The pools of the harness and of each worker process.
const (
	harnessMaxConns = 6
	workerMaxConns  = 8
)

// Defaults of Config: the short form, about a minute on two cores.
const (
	DefaultDuration     = 40 * time.Second
	DefaultDaemons      = 3
	DefaultWorkers      = 2
	DefaultFlowEvery    = 200 * time.Millisecond
	DefaultMinNodes     = 5
	DefaultMaxNodes     = 40
	DefaultFaultGap     = 2 * time.Second
	DefaultCrashDown    = 3 * time.Second
	DefaultIdleInTx     = 3 * time.Second
	DefaultDrainTimeout = 3 * time.Minute
	DefaultRestartDelay = time.Second
)

// Config is one run of the suite.
type Config struct {
	// FFD is the path of an `ffd` binary. Required.
	FFD string
	// Self is the binary run as a worker process (EnvRole=RoleWorker);
	// a test passes os.Args[0]. Required.
	Self string
	// Dir holds the cluster, the logs and the consumers' output; it must
	// be reachable by the postgres OS user when run as root. Required.
	Dir string
	// Duration of the fault phase. Default DefaultDuration.
	Duration time.Duration
	// Daemons (`ffd run` processes). Default DefaultDaemons.
	Daemons int
	// Workers (worker processes). Default DefaultWorkers.
	Workers int
	// FlowEvery is the pause between two DAG submissions. Default
	// DefaultFlowEvery.
	FlowEvery time.Duration
	// MinNodes and MaxNodes bound a DAG's size. Default DefaultMinNodes
	// and DefaultMaxNodes.
	MinNodes, MaxNodes int
	// FaultGap is the pause between two faults. Default DefaultFaultGap.
	FaultGap time.Duration
	// CrashDown is how long Postgres stays down after a crash. Default
	// DefaultCrashDown.
	CrashDown time.Duration
	// IdleInTransactionTimeout is the daemons' session guard (their
	// --idle-in-transaction-timeout); a frozen daemon stays frozen for
	// twice this plus six seconds. Default DefaultIdleInTx; 0 keeps ffd's
	// own default.
	IdleInTransactionTimeout time.Duration
	// DrainTimeout bounds the wait for the system to drain after the
	// faults. Default DefaultDrainTimeout.
	DrainTimeout time.Duration
	// CitusNodes, when above 0, runs the suite on a Citus cluster the
	// harness starts: a coordinator and this many worker nodes (the citus
	// extension must be installed for the local PostgreSQL), the tables
	// placed as `ffd migrate distribution` prints. Every process connects
	// to the coordinator, the WAL consumer streams from every worker node,
	// and a crash restart crash-restarts one node, in turn: worker node
	// 1, the coordinator, then the other worker nodes.
	// Default 0: one Postgres.
	CitusNodes int
	// Faults are the kinds of fault injected (FaultKillDaemon, ...,
	// FaultKillConsumer), each once per shuffled cycle. Default: every
	// kind.
	Faults []string
	// FreezeFor is how long a frozen daemon stays frozen; at least the
	// session guard's bound plus four seconds. Default: twice the guard's
	// bound plus six seconds.
	FreezeFor time.Duration
	// Hogs is how many busy-looping processes load the machine from the
	// start of the fault phase to the end of the drain (a machine shared
	// with heavy work). Default 0.
	Hogs int
	// LongRuns makes one handler run in eight (of the DAGs' steps) last
	// 1.5 to 3 s, as long as a lease's TTL and past two heartbeats, so
	// that leases are renewed while the faults and the load go on (most
	// runs last milliseconds and are never renewed). Default false.
	LongRuns bool
	// Seed makes the DAGs and the fault schedule repeatable. Default 0
	// (a fixed seed; pass a random one to explore).
	Seed uint64
	// Logf reports progress. Default: none.
	Logf func(format string, args ...any)
}

// guardBound is the daemons' idle-in-transaction bound: the suite's
// setting, else ffd's default.
func (c *Config) guardBound() time.Duration {
	if c.IdleInTransactionTimeout > 0 {
		return c.IdleInTransactionTimeout
	}
	return ffd.DefaultIdleInTransactionTimeout
}

func (c *Config) normalize() error {
	if c.FFD == "" || c.Self == "" || c.Dir == "" {
		return errors.New("chaos: FFD, Self and Dir are required")
	}
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Duration, DefaultDuration)
	def(&c.FlowEvery, DefaultFlowEvery)
	def(&c.FaultGap, DefaultFaultGap)
	def(&c.CrashDown, DefaultCrashDown)
	def(&c.DrainTimeout, DefaultDrainTimeout)
	if c.IdleInTransactionTimeout < 0 {
		c.IdleInTransactionTimeout = 0
	}
	defInt(&c.Daemons, DefaultDaemons)
	defInt(&c.Workers, DefaultWorkers)
	defInt(&c.MinNodes, DefaultMinNodes)
	defInt(&c.MaxNodes, DefaultMaxNodes)
	if c.CitusNodes < 0 {
		c.CitusNodes = 0
	}
	if c.MaxNodes < c.MinNodes {
		return fmt.Errorf("chaos: MaxNodes %d below MinNodes %d", c.MaxNodes, c.MinNodes)
	}
	if len(c.Faults) == 0 {
		c.Faults = append(append([]string{}, cycle...), FaultKillConsumer)
	}
	for _, f := range c.Faults {
		if !slices.Contains(cycle, f) && f != FaultKillConsumer {
			return fmt.Errorf("chaos: unknown fault %q (want one of %v or %s)", f, cycle, FaultKillConsumer)
		}
	}
	if bound := c.guardBound(); c.FreezeFor > 0 && c.FreezeFor < bound+4*time.Second {
		return fmt.Errorf("chaos: FreezeFor %s is shorter than the session guard's bound %s plus 4s", c.FreezeFor, bound)
	}
	if c.Hogs < 0 {
		c.Hogs = 0
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	return nil
}

// Report is what a run did and what it found.
type Report struct {
	Seed uint64 `json:"seed"`
	// FaultPhase is how long faults were injected.
	FaultPhase time.Duration `json:"fault_phase"`
	// Flows submitted and acknowledged (a submission whose commit was
	// lost to a fault may be in the database without an acknowledgement).
	Flows      int `json:"flows"`
	FlowsAcked int `json:"flows_acked"`
	// DurableFlows are the durable workflows among them found at the end
	// (internal/chaos/durable.go), Spawned the steps their spawners added
	// at run time, Signals the signals to their gates acknowledged.
	DurableFlows int `json:"durable_flows"`
	Spawned      int `json:"spawned"`
	Signals      int `json:"signals"`
	// KeyedFlows are the keyed flows found at the end
	// (internal/chaos/keyed.go), KeySamples the samples of their keys'
	// running executions, KeyedPeakStarts the most first starts of the
	// keyed lane within its rate window.
	KeyedFlows      int `json:"keyed_flows"`
	KeySamples      int `json:"key_samples"`
	KeyedPeakStarts int `json:"keyed_peak_starts"`
	// The workflows workload (internal/chaos/links.go), found at the
	// end: sub-flows (SubflowsCancelled of them cancelled mid-way),
	// sagas and the compensation steps they ran, versioned flows, and
	// the events published twice that each started one flow.
	Subflows          int `json:"subflows"`
	SubflowsCancelled int `json:"subflows_cancelled"`
	Sagas             int `json:"sagas"`
	Compensations     int `json:"compensations"`
	VersionedFlows    int `json:"versioned_flows"`
	EventsFired       int `json:"events_fired"`
	// Executions in the database at the end, and their outbox events.
	Executions int `json:"executions"`
	Events     int `json:"events"`
	// Faults injected, by kind.
	Faults map[string]int `json:"faults"`
	// FrozenInTransaction counts the freezes that caught a daemon inside
	// a transaction (the others froze it between transactions).
	FrozenInTransaction int `json:"frozen_in_transaction"`
	// Starts of each process (restarts after kills and exits included).
	Starts map[string]int `json:"starts"`
	// Drain is the time from the end of the last fault until nothing was
	// left to run or dispatch.
	Drain time.Duration `json:"drain"`
	// Resume is, for each crash restart, the time from the server
	// accepting connections again to the next completion event.
	Resume []time.Duration `json:"resume"`
	// Duplicates each consumer printed (the same event id again after a
	// kill or a crash): expected, removed by dedupe.
	CursorDuplicates int `json:"cursor_duplicates"`
	WALDuplicates    int `json:"wal_duplicates"`
	// HandlerSuccesses are the handler runs that returned success (each
	// worker process logs them); SuccessesNotRecorded those whose attempt
	// did not end succeeded though their execution was not cancelled (a
	// killed worker, or a lost lease); SucceededEndedOtherwise the
	// executions whose handler succeeded that still ended expired or
	// failed. In a run whose faults take nothing from the workers, the
	// last two must be 0.
	HandlerSuccesses        int `json:"handler_successes"`
	SuccessesNotRecorded    int `json:"successes_not_recorded"`
	SucceededEndedOtherwise int `json:"succeeded_ended_otherwise"`
	// PeakConnections is the most sessions seen at once on the (first)
	// server, sampled every 250 ms; ConnectionBudget what the processes'
	// pools allow; SessionsOpened the sessions the server accepted from
	// the start of the fault phase to the end of the drain (reconnects).
	PeakConnections  int   `json:"peak_connections"`
	ConnectionBudget int   `json:"connection_budget"`
	SessionsOpened   int64 `json:"sessions_opened"`
	// PeakLoad is the machine's highest one-minute load average seen.
	PeakLoad float64 `json:"peak_load"`
	// Violations of an invariant, of a DAG's ground truth or of the
	// consumers' completeness. Must be empty.
	Violations []string `json:"violations"`
}

// harness is one run in progress.
type harness struct {
	cfg Config
	rng *rand.Rand
	// servers are the Postgres servers: one, or Citus's coordinator
	// first and its worker nodes after it; ports are theirs, kept across
	// crash restarts.
	servers []*pgserver.Server
	ports   []int
	url     string // the coordinator's
	pool    *pgxpool.Pool

	daemons, workers []*proc
	cursor, wal      *proc
	all              []*proc
	hogs             []*proc

	mu        sync.Mutex
	report    Report
	flows     map[string]*submitted // by flow id
	durable   map[string]*durable   // by flow id
	keyed     map[string]*keyedFlow // by flow id
	links     links                 // the workflows workload
	kills     map[*proc]int         // SIGKILLs the suite sent, by process
	serverMu  sync.Mutex            // held while Postgres is being crashed and restarted
	progress  progressLog
	lastFault time.Time
}

// Run runs the suite once. The error is for a suite that could not run at
// all; what it found is in the Report's Violations.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.normalize(); err != nil {
		return nil, err
	}
	h := &harness{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, 0xc4a05)),
		flows: map[string]*submitted{}, durable: map[string]*durable{}, keyed: map[string]*keyedFlow{}, kills: map[*proc]int{},
		links: links{flows: map[string]*linked{}, events: map[string]bool{}}}
	h.report.Seed = cfg.Seed
	h.report.Faults = map[string]int{}
	h.report.Starts = map[string]int{}
	h.report.ConnectionBudget = h.connectionBudget()
	defer h.close()
	if err := h.setUp(ctx); err != nil {
		return nil, err
	}
	runCtx, stopProcs := context.WithCancel(ctx)
	defer stopProcs()
	if err := h.startProcesses(runCtx); err != nil {
		return nil, err
	}
	stopWatching := watch(ctx, h.monitor, h.sampleKeys, h.sampleLoad)
	defer stopWatching()
	sessions, sessErr := h.sessionsOpened(ctx)
	h.startHogs(runCtx)
	if err := h.faultPhase(ctx); err != nil {
		return nil, err
	}
	h.drain(ctx)
	stopWatching()
	h.stopHogs()
	if after, err := h.sessionsOpened(ctx); err == nil && sessErr == nil {
		h.report.SessionsOpened = after - sessions
	}
	h.verify(ctx)
	h.verifyConsumers(ctx)
	h.verifyConnections()
	h.stopProcesses()
	h.collectExits()
	h.verifySuccesses(ctx, !h.takesFromWorkers())
	sort.Strings(h.report.Violations)
	return &h.report, nil
}

// watch runs each of watchers until the returned stop is called (once or
// more) or ctx ends; stop returns once they all have returned.
func watch(ctx context.Context, watchers ...func(context.Context)) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range watchers {
		wg.Go(func() { w(wctx) })
	}
	return func() { cancel(); wg.Wait() }
}

// setUp starts the servers, forms and migrates the cluster, connects the
// harness's pool and sets up the keyed lane.
func (h *harness) setUp(ctx context.Context) error {
	cfg := h.cfg
	h.servers, h.ports = make([]*pgserver.Server, 1+cfg.CitusNodes), make([]int, 1+cfg.CitusNodes)
	for i := range h.servers {
		if err := h.startServer(ctx, i); err != nil {
			return err
		}
	}
	if err := h.formCluster(ctx); err != nil {
		return err
	}
	if out, err := exec.CommandContext(ctx, cfg.FFD, "migrate", "up", "--database-url", h.url, "--log-level", "warn").CombinedOutput(); err != nil {
		return fmt.Errorf("ffd migrate up: %w\n%s", err, out)
	}
	if err := h.distribute(ctx); err != nil {
		return err
	}
	pcfg, err := pgxpool.ParseConfig(h.appURL("harness"))
	if err != nil {
		return err
	}
	pcfg.MaxConns = harnessMaxConns
	guard := ffd.DefaultSessionConfig()
	guard.ConnectTimeout = 2 * time.Second
	if err := ffd.ConfigurePool(pcfg, &guard); err != nil {
		return err
	}
	if h.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	if err := h.setUpLinks(ctx); err != nil {
		return err
	}
	return h.setUpKeyed(ctx)
}

// faultPhase runs submissions, consumer kills and faults together for
// the configured duration. Work goes on until the last fault has ended
// (a freeze must see work to check that the others progress).
func (h *harness) faultPhase(ctx context.Context) error {
	phaseCtx, endPhase := context.WithTimeout(ctx, h.cfg.Duration)
	workCtx, endWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	stopped := map[string]time.Time{}
	work := func(name string, f func(context.Context)) {
		wg.Go(func() {
			f(workCtx)
			mu.Lock()
			stopped[name] = time.Now()
			mu.Unlock()
		})
	}
	work("submitter", h.submit)
	work("publisher", h.publishEvents)
	if slices.Contains(h.cfg.Faults, FaultKillConsumer) {
		work("consumer kills", h.killConsumers)
	}
	started := time.Now()
	h.injectFaults(phaseCtx)
	endPhase()
	endWork()
	wg.Wait()
	h.report.FaultPhase = time.Since(started)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	h.mu.Lock()
	last := h.lastFault
	h.mu.Unlock()
	if last.IsZero() {
		last = started
	}
	// The drain is counted from the last fault: what the workload did
	// after it (a submission in flight, the durable flows' signals sent
	// late) is part of it.
	var after []string
	for name, at := range stopped {
		after = append(after, fmt.Sprintf("%s %s", name, at.Sub(last).Round(100*time.Millisecond)))
	}
	slices.Sort(after)
	h.cfg.Logf("chaos: faults over after %s (%v); the workload stopped after the last fault: %s; draining",
		h.report.FaultPhase.Round(time.Second), h.report.Faults, strings.Join(after, ", "))
	return nil
}

// takesFromWorkers reports whether a fault of the run can take work from
// a worker process (kill it, end its sessions, crash the server under
// it), so that a success it logged may rightly go unrecorded.
func (h *harness) takesFromWorkers() bool {
	return slices.ContainsFunc(h.cfg.Faults, func(f string) bool {
		return f == FaultKillWorker || f == FaultTerminate || f == FaultCrash
	})
}

// verifyConnections checks, in a run whose faults leave every session
// alone (no termination, no crash restart), that the processes stayed
// within their pools: at no moment more sessions than the budget, and no
// more sessions opened during the run than the budget (each connection
// of each pool opened at most once more: no reconnect storm).
func (h *harness) verifyConnections() {
	if slices.Contains(h.cfg.Faults, FaultTerminate) || slices.Contains(h.cfg.Faults, FaultCrash) ||
		slices.Contains(h.cfg.Faults, FaultKillDaemon) || slices.Contains(h.cfg.Faults, FaultKillWorker) {
		return
	}
	r := &h.report
	if r.PeakConnections > r.ConnectionBudget {
		h.violation("%d sessions at once, over the pools' budget of %d", r.PeakConnections, r.ConnectionBudget)
	}
	if r.SessionsOpened > int64(r.ConnectionBudget) {
		h.violation("%d sessions opened during the run, more than the pools' budget of %d: a reconnect storm", r.SessionsOpened, r.ConnectionBudget)
	}
}

// violation records a breach.
func (h *harness) violation(format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.report.Violations = append(h.report.Violations, fmt.Sprintf(format, args...))
}

// startServer starts server i (0: the one Postgres, or Citus's
// coordinator) on its port, or on a free one at its first start.
func (h *harness) startServer(ctx context.Context, i int) error {
	dir := filepath.Join(h.cfg.Dir, "pg")
	if i > 0 {
		dir = filepath.Join(h.cfg.Dir, fmt.Sprintf("pg-node-%d", i))
	}
	sock := filepath.Join(dir, "sock")
	if err := os.MkdirAll(sock, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	settings := map[string]string{"max_connections": "200"}
	if h.cfg.CitusNodes > 0 {
		settings["shared_preload_libraries"] = "citus"
		settings["max_prepared_transactions"] = "200"
		// A consumer's events wait for Citus's recovery of two-phase
		// commits (docs/scaling.md).
		settings["citus.recover_2pc_interval"] = "1s"
		// No cache of connections between nodes (docs/scaling.md,
		// "Settings"): the suite's many sessions would hold them idle
		// and starve one another.
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), SocketDir: sock, Port: h.ports[i],
		Settings: settings, StartTimeout: serverStartBudget})
	if err != nil {
		return err
	}
	h.servers[i], h.ports[i] = srv, srv.Port()
	if i == 0 {
		h.url = srv.URL("postgres")
	}
	return nil
}

// serverStartBudget bounds a server's start, and its crash recovery
// after crash_restart, before the suite calls it a violation. Under the
// suite's load a node's recovery on two shared cores took over a minute
// (pgserver's default): three Citus nodes and every process of the run
// reached a load average of 22 to 42, and a worker node that was still
// recovering failed the run as one that never came back.
const serverStartBudget = 5 * time.Minute

// formCluster makes the servers one Citus cluster: the extension on
// each, the worker nodes added to the coordinator.
func (h *harness) formCluster(ctx context.Context) error {
	if h.cfg.CitusNodes == 0 {
		return nil
	}
	for i, srv := range h.servers {
		if err := h.execOn(ctx, srv.URL("postgres"), `CREATE EXTENSION IF NOT EXISTS citus`); err != nil {
			return fmt.Errorf("citus on node %d: %w", i, err)
		}
	}
	if err := h.execOn(ctx, h.url, `SELECT citus_set_coordinator_host('127.0.0.1', $1)`, h.ports[0]); err != nil {
		return err
	}
	for _, port := range h.ports[1:] {
		if err := h.execOn(ctx, h.url, `SELECT citus_add_node('127.0.0.1', $1)`, port); err != nil {
			return fmt.Errorf("add worker node %d: %w", port, err)
		}
	}
	return nil
}

// distribute runs, on Citus, the calls `ffd migrate distribution` prints,
// as an operator would.
func (h *harness) distribute(ctx context.Context) error {
	if h.cfg.CitusNodes == 0 {
		return nil
	}
	out, err := exec.CommandContext(ctx, h.cfg.FFD, "migrate", "distribution", "--database-url", h.url, "--log-level", "warn").Output()
	if err != nil {
		return fmt.Errorf("ffd migrate distribution: %w\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "SELECT ") || strings.HasPrefix(line, "DO ") {
			if err := h.execOn(ctx, h.url, line); err != nil {
				return fmt.Errorf("%s: %w", line, err)
			}
		}
	}
	return nil
}

// execOn runs one statement on its own connection to url.
func (h *harness) execOn(ctx context.Context, url, sql string, args ...any) error {
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(cctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(cctx, sql, args...)
	return err
}

// appURL is the database URL naming its sessions chaos-<name> in
// pg_stat_activity, which is how the faults find them.
func (h *harness) appURL(name string) string {
	u, _ := url.Parse(h.url)
	q := u.Query()
	q.Set("application_name", "chaos-"+name)
	u.RawQuery = q.Encode()
	return u.String()
}

func (h *harness) startProcesses(ctx context.Context) error {
	dir := h.cfg.Dir
	common := []string{"--log-format", "json", "--log-level", "info", "--connect-timeout", "2s"}
	if h.cfg.IdleInTransactionTimeout > 0 {
		common = append(common, "--idle-in-transaction-timeout", h.cfg.IdleInTransactionTimeout.String())
	}
	for i := range h.cfg.Daemons {
		name := fmt.Sprintf("daemon-%d", i+1)
		args := append([]string{"run", "--database-url", h.appURL(name), "--admin-addr=", "--retention", "forever", "--stop-timeout", "10s"}, common...)
		h.daemons = append(h.daemons, newProc(dir, name, h.cfg.FFD, args, nil, DefaultRestartDelay))
	}
	for i := range h.cfg.Workers {
		name := fmt.Sprintf("worker-%d", i+1)
		env := []string{EnvRole + "=" + RoleWorker, envURL + "=" + h.url, envName + "=" + name,
			envVersions + "=" + strings.Join(versionsOf(i, h.cfg.Workers), ","),
			envSuccessLog + "=" + filepath.Join(dir, "successes-"+name+".log")}
		if h.cfg.LongRuns {
			env = append(env, envLongRuns+"=1")
		}
		h.workers = append(h.workers, newProc(dir, name, h.cfg.Self, nil, env, DefaultRestartDelay))
	}
	h.cursor = newProc(dir, "cursor", h.cfg.FFD, append([]string{"events", "tail", "--consumer", "chaos", "--follow",
		"--poll-interval", "200ms", "--database-url", h.appURL("cursor")}, common...), nil, DefaultRestartDelay)
	h.cursor.outPath = filepath.Join(dir, "cursor.jsonl")
	h.wal = newProc(dir, "wal", h.cfg.FFD, append([]string{"events", "tail", "--wal", "--slot", "chaos", "--follow",
		"--database-url", h.appURL("wal")}, common...), nil, DefaultRestartDelay)
	h.wal.outPath = filepath.Join(dir, "wal.jsonl")
	h.all = append(append(append([]*proc{}, h.daemons...), h.workers...), h.cursor, h.wal)
	for _, p := range h.all {
		go p.supervise(ctx)
	}
	// The WAL stream starts at its slot's creation: wait for the slot
	// (on every node whose WAL holds the outbox) before anything is
	// written, so that it can see every event.
	holders := h.servers
	if len(holders) > 1 {
		holders = holders[1:]
	}
	deadline := time.Now().Add(time.Minute)
	for _, srv := range holders {
		for {
			n, err := h.slots(ctx, srv)
			if err == nil && n == 1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the WAL consumer created no slot on %s within a minute (%v): %s", srv.URL("postgres"), err, h.wal.logTail(2000))
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}

// slots counts the WAL consumer's slots on srv.
func (h *harness) slots(ctx context.Context, srv *pgserver.Server) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, srv.URL("postgres"))
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	err = conn.QueryRow(cctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'chaos'`).Scan(&n)
	return n, err
}

func (h *harness) stopProcesses() {
	var wg sync.WaitGroup
	for _, p := range h.all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.stop(syscall.SIGTERM, 15*time.Second)
		}()
	}
	wg.Wait()
}

// collectExits reports the process starts and checks how each run ended:
// by a fault's SIGKILL, or, for the last run, with status 0 on the suite's
// final SIGTERM. Any other exit is a violation: a daemon, worker or
// consumer must outlast terminated sessions and crash restarts, and one
// started while Postgres is down must wait for it (under systemd, a
// service that keeps exiting at start-up soon hits its restart limit).
func (h *harness) collectExits() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, p := range h.all {
		starts, exits := p.history()
		h.report.Starts[p.name] = starts
		killed := h.kills[p]
		for i, e := range exits {
			last := i == len(exits)-1
			switch {
			case last && e.how != "exit 0":
				h.report.Violations = append(h.report.Violations, fmt.Sprintf("%s did not stop cleanly on SIGTERM: %s", p.name, e.how))
			case last:
			case e.how == "signal killed" && killed > 0:
				killed--
			default:
				h.report.Violations = append(h.report.Violations, fmt.Sprintf("%s exited on its own (%s) after running %s",
					p.name, e.how, e.ran.Round(time.Millisecond)))
			}
		}
	}
}

func (h *harness) close() {
	for _, p := range append(h.all, h.hogs...) {
		p.stop(syscall.SIGKILL, 5*time.Second)
	}
	if h.pool != nil {
		h.pool.Close()
	}
	h.serverMu.Lock()
	defer h.serverMu.Unlock()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, srv := range h.servers {
		if srv != nil {
			_ = srv.Stop(sctx)
		}
	}
}
