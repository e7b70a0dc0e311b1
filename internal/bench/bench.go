// Package bench measures ffd on the anchor scenarios (`ffd bench`): raw
// claim/complete throughput, DAG hop latency, fan-out joins and sibling
// cancellation, cancel_flow, and recovery from vanished workers and a
// killed listener. Each scenario works in a namespace of its own and
// reports a JSON-ready Report; docs/benchmarks.md documents the schema and
// the results.
package bench

import (
	"context"
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Scenarios lists the scenario names.
var Scenarios = []string{"throughput", "curve", "history", "memory", "enqueue", "chain", "hop", "fanout", "big-flow", "cancel-flow", "recovery", "cancel-running", "daemons"}

// scenarios runs each scenario by name.
var scenarios = map[string]func(context.Context, *Env, Params, *Report) error{
	"throughput": throughput, "curve": curve, "history": history, "memory": memory,
	"enqueue": enqueue, "chain": chain, "hop": hop, "fanout": fanout, "big-flow": bigFlow,
	"cancel-flow": cancelFlow, "recovery": recovery, "cancel-running": cancelRunning, "daemons": daemons,
}

// Params are every scenario's sizes; zero values take the defaults.
type Params struct {
	// throughput, enqueue
	Executions int `json:"executions,omitempty"` // default 20000
	Workers    int `json:"workers,omitempty"`    // default 100
	// enqueue: single Create calls timed one by one
	Creates int `json:"creates,omitempty"` // default 1000
	// chain
	Flows       int `json:"flows,omitempty"`        // default 200
	ChainLength int `json:"chain_length,omitempty"` // default 10
	ChainWorker int `json:"chain_workers,omitempty"`
	// hop: the chain scenario with idle workers, a few chains at a time
	HopChains int `json:"hop_chains,omitempty"` // default 4
	HopLength int `json:"hop_length,omitempty"` // default 25
	// fanout
	FanWidth int `json:"fan_width,omitempty"` // default 1000
	Repeats  int `json:"repeats,omitempty"`   // default 20
	// cancel-flow
	FlowSizes []int `json:"flow_sizes,omitempty"` // default 10, 100, 1000
	// recovery
	Leases        int           `json:"leases,omitempty"`         // default 1000
	LeaseTTL      time.Duration `json:"lease_ttl,omitempty"`      // default 2s
	Burst         int           `json:"burst,omitempty"`          // default 10000
	SweepInterval time.Duration `json:"sweep_interval,omitempty"` // default 1s
	// cancel-running
	Cancels int `json:"cancels,omitempty"` // default 200
	// curve: throughput at each worker concurrency (Executions each,
	// fewer below 100 workers: 200 per worker, at least 2,000)
	WorkerCurve []int `json:"worker_curve,omitempty"` // default 1, 10, 100, 400
	// history: finished executions already in the tables
	Preload int `json:"preload,omitempty"` // default 1000000
	// history, and comparisons with a peer: alternating rounds of each side
	Rounds int `json:"rounds,omitempty"` // default 5
	// big-flow: fan-out widths of 1 -> N -> 1
	BigFlowSizes []int `json:"big_flow_sizes,omitempty"` // default 100, 10000
	// memory: rounds of Executions executions through a daemon and a
	// Workers-slot worker, each an OS process of its own
	MemoryRounds int `json:"memory_rounds,omitempty"` // default 5
	// daemons: Flows root -> DaemonFan flows, their roots finished, then
	// dispatched by each number of daemons in DaemonCurve
	DaemonFan   int   `json:"daemon_fan,omitempty"`   // default 50
	DaemonCurve []int `json:"daemon_curve,omitempty"` // default 1, 2, 4
}

func (p *Params) defaults() {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&p.Executions, 20000)
	def(&p.Workers, 100)
	def(&p.Flows, 200)
	def(&p.ChainLength, 10)
	def(&p.ChainWorker, 16)
	def(&p.HopChains, 4)
	def(&p.HopLength, 25)
	def(&p.FanWidth, 1000)
	def(&p.Repeats, 20)
	def(&p.Leases, 1000)
	def(&p.Burst, 10000)
	def(&p.Cancels, 200)
	def(&p.Creates, 1000)
	def(&p.Preload, 1000000)
	def(&p.Rounds, 5)
	def(&p.MemoryRounds, 5)
	def(&p.DaemonFan, 50)
	if len(p.DaemonCurve) == 0 {
		p.DaemonCurve = []int{1, 2, 4}
	}
	if len(p.WorkerCurve) == 0 {
		p.WorkerCurve = []int{1, 10, 100, 400}
	}
	if len(p.BigFlowSizes) == 0 {
		p.BigFlowSizes = []int{100, 10000}
	}
	if len(p.FlowSizes) == 0 {
		p.FlowSizes = []int{10, 100, 1000}
	}
	if p.LeaseTTL <= 0 {
		p.LeaseTTL = 2 * time.Second
	}
	if p.SweepInterval <= 0 {
		p.SweepInterval = time.Second
	}
}

// Report is one scenario's result.
type Report struct {
	Scenario   string         `json:"scenario"`
	Parameters Params         `json:"parameters"`
	Machine    Machine        `json:"machine"`
	StartedAt  time.Time      `json:"started_at"`
	DurationMS int64          `json:"duration_ms"`
	Figures    map[string]any `json:"figures"`
	Targets    []Target       `json:"targets"`
}

// Machine describes where the run happened.
type Machine struct {
	Cores             int    `json:"cores"`
	GoVersion         string `json:"go_version"`
	OS                string `json:"os"`
	PostgresVersion   string `json:"postgres_version"`
	Fsync             string `json:"fsync"`
	SynchronousCommit string `json:"synchronous_commit"`
	SharedBuffers     string `json:"shared_buffers"`
}

// Target is a goal and whether this run met it.
type Target struct {
	Name  string  `json:"name"`
	Goal  string  `json:"goal"`
	Value float64 `json:"value"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
}

// Env is what a scenario runs on.
type Env struct {
	Pool *pgxpool.Pool
	URL  string
	Log  *zap.Logger
	// Namespace isolates the run's rows; Cleanup deletes them.
	Namespace string
	// NewDatabase makes a fresh migrated database on the same server, for
	// scenarios that compare two (history); nil when the run cannot create
	// databases. drop removes it.
	NewDatabase func(ctx context.Context) (pool *pgxpool.Pool, url string, drop func(), err error)
}

// NewEnv prepares a run over pool, in a namespace of its own.
func NewEnv(pool *pgxpool.Pool, url string, log *zap.Logger) *Env {
	if log == nil {
		log = zap.NewNop()
	}
	return &Env{Pool: pool, URL: url, Log: log, Namespace: "bench_" + ident.NewUUID().String()[24:]}
}

func (e *Env) lane(name string) string { return e.Namespace + "." + name }

// Run runs one scenario.
func Run(ctx context.Context, env *Env, scenario string, p Params) (*Report, error) {
	p.defaults()
	r := &Report{Scenario: scenario, Parameters: p, StartedAt: time.Now().UTC(), Figures: map[string]any{}}
	var err error
	if r.Machine, err = machine(ctx, env.Pool); err != nil {
		return nil, err
	}
	start := time.Now()
	run, ok := scenarios[scenario]
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q: want one of %v", scenario, Scenarios)
	}
	err = run(ctx, env, p, r)
	r.DurationMS = time.Since(start).Milliseconds()
	if err != nil {
		return nil, fmt.Errorf("scenario %s: %w", scenario, err)
	}
	return r, nil
}

func machine(ctx context.Context, pool *pgxpool.Pool) (Machine, error) {
	m := Machine{Cores: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH}
	err := pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('shared_buffers')`).Scan(
		&m.PostgresVersion, &m.Fsync, &m.SynchronousCommit, &m.SharedBuffers)
	if err != nil {
		return m, fmt.Errorf("read server settings: %w", err)
	}
	return m, nil
}

// ms renders a duration in milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// percentiles of durations (nearest rank).
func percentiles(ds []time.Duration, ps ...float64) []time.Duration {
	if len(ds) == 0 {
		return make([]time.Duration, len(ps))
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	out := make([]time.Duration, len(ps))
	for i, p := range ps {
		idx := int(p/100*float64(len(s))+0.5) - 1
		out[i] = s[min(max(idx, 0), len(s)-1)]
	}
	return out
}

func target(name, goal string, value float64, unit string, met bool) Target {
	return Target{Name: name, Goal: goal, Value: value, Unit: unit, Met: met}
}

// Cleanup deletes every row the run wrote (for runs against a database
// that is not throwaway).
func (e *Env) Cleanup(ctx context.Context) error {
	if err := store.DeleteNamespace(ctx, e.Pool, e.Namespace); err != nil {
		return fmt.Errorf("clean up the bench rows: %w", err)
	}
	return nil
}
