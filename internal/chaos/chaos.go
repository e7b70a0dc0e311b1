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
	// Seed makes the DAGs and the fault schedule repeatable. Default 0
	// (a fixed seed; pass a random one to explore).
	Seed uint64
	// Logf reports progress. Default: none.
	Logf func(format string, args ...any)
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

	mu        sync.Mutex
	report    Report
	flows     map[string]*submitted // by flow id
	durable   map[string]*durable   // by flow id
	keyed     map[string]*keyedFlow // by flow id
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
		flows: map[string]*submitted{}, durable: map[string]*durable{}, keyed: map[string]*keyedFlow{}, kills: map[*proc]int{}}
	h.report.Seed = cfg.Seed
	h.report.Faults = map[string]int{}
	h.report.Starts = map[string]int{}
	defer h.close()
	h.servers, h.ports = make([]*pgserver.Server, 1+cfg.CitusNodes), make([]int, 1+cfg.CitusNodes)
	for i := range h.servers {
		if err := h.startServer(ctx, i); err != nil {
			return nil, err
		}
	}
	if err := h.formCluster(ctx); err != nil {
		return nil, err
	}
	if out, err := exec.CommandContext(ctx, cfg.FFD, "migrate", "up", "--database-url", h.url, "--log-level", "warn").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ffd migrate up: %w\n%s", err, out)
	}
	if err := h.distribute(ctx); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(h.appURL("harness"))
	if err != nil {
		return nil, err
	}
	pcfg.MaxConns = 6
	guard := ffd.DefaultSessionConfig()
	guard.ConnectTimeout = 2 * time.Second
	if err := ffd.ConfigurePool(pcfg, &guard); err != nil {
		return nil, err
	}
	if h.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if err := h.setUpKeyed(ctx); err != nil {
		return nil, err
	}
	runCtx, stopProcs := context.WithCancel(ctx)
	defer stopProcs()
	if err := h.startProcesses(runCtx); err != nil {
		return nil, err
	}
	monCtx, stopMonitor := context.WithCancel(ctx)
	monitored := make(chan struct{})
	go func() {
		defer close(monitored)
		h.monitor(monCtx)
	}()
	defer func() { stopMonitor(); <-monitored }()
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		h.sampleKeys(sampleCtx)
	}()
	defer func() { stopSampling(); <-sampled }()

	// The fault phase: submissions, consumer kills and faults together.
	// Work goes on until the last fault has ended (a freeze must see work
	// to check that the others progress).
	phaseCtx, endPhase := context.WithTimeout(ctx, cfg.Duration)
	workCtx, endWork := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); h.submit(workCtx) }()
	go func() { defer wg.Done(); h.killConsumers(workCtx) }()
	started := time.Now()
	h.injectFaults(phaseCtx)
	endPhase()
	endWork()
	wg.Wait()
	h.report.FaultPhase = time.Since(started)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	cfg.Logf("chaos: faults over after %s (%v); draining", h.report.FaultPhase.Round(time.Second), h.report.Faults)

	h.drain(ctx)
	stopSampling()
	<-sampled
	h.verify(ctx)
	h.verifyConsumers(ctx)
	h.stopProcesses()
	h.collectExits()
	sort.Strings(h.report.Violations)
	return &h.report, nil
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
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), SocketDir: sock, Port: h.ports[i],
		Settings: settings})
	if err != nil {
		return err
	}
	h.servers[i], h.ports[i] = srv, srv.Port()
	if i == 0 {
		h.url = srv.URL("postgres")
	}
	return nil
}

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
		if strings.HasPrefix(line, "SELECT ") {
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
		env := []string{EnvRole + "=" + RoleWorker, envURL + "=" + h.url, envName + "=" + name}
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
	for _, p := range h.all {
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
