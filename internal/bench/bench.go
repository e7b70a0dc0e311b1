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
	"reflect"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// scenario is one benchmark: the name users give it, what it runs, and
// whether the peer program has an equivalent (ffd bench --peer).
type scenario struct {
	name     string
	run      func(context.Context, *Env, Params, *Report) error
	compared bool
}

// table is every scenario, once; the lists below and the CLI's choices
// are read from it.
var table = []scenario{
	{"throughput", throughput, true}, {"curve", curve, true}, {"history", history, false}, {"memory", memory, false},
	{"enqueue", enqueue, true}, {"chain", chain, false}, {"hop", hop, false}, {"fanout", fanout, false},
	{"big-flow", bigFlow, false}, {"cancel-flow", cancelFlow, false}, {"recovery", recovery, false},
	{"cancel-running", cancelRunning, false}, {"daemons", daemons, false}, {"spawn", spawn, false},
	{"keys", keys, false}, {"floor", floor, false}, {"python-worker", pythonWorker, false},
}

// Scenarios lists the scenario names; CompareScenarios those with a peer
// equivalent.
var Scenarios, CompareScenarios = func() (all, compared []string) {
	for _, s := range table {
		all = append(all, s.name)
		if s.compared {
			compared = append(compared, s.name)
		}
	}
	return all, compared
}()

func find(name string) (scenario, bool) {
	for _, s := range table {
		if s.name == name {
			return s, true
		}
	}
	return scenario{}, false
}

// Params are every scenario's sizes; zero values take the defaults of
// Params.defaults (ffd bench --help shows them).
type Params struct {
	// throughput, enqueue, keys
	Executions int `json:"executions,omitempty"`
	Workers    int `json:"workers,omitempty"` // default 100
	// enqueue: single Create calls timed one by one
	Creates int `json:"creates,omitempty"`
	// chain
	Flows       int `json:"flows,omitempty"` // default 200
	ChainLength int `json:"chain_length,omitempty"`
	ChainWorker int `json:"chain_workers,omitempty"`
	// hop: the chain scenario with idle workers, a few chains at a time
	HopChains int `json:"hop_chains,omitempty"`
	HopLength int `json:"hop_length,omitempty"`
	// fanout, spawn (children of the one spawning step)
	FanWidth int `json:"fan_width,omitempty"`
	Repeats  int `json:"repeats,omitempty"` // default 20
	// cancel-flow
	FlowSizes []int `json:"flow_sizes,omitempty"`
	// recovery
	Leases        int           `json:"leases,omitempty"`    // default 1000
	LeaseTTL      time.Duration `json:"lease_ttl,omitempty"` // default 2s
	Burst         int           `json:"burst,omitempty"`     // default 10000
	SweepInterval time.Duration `json:"sweep_interval,omitempty"`
	// cancel-running
	Cancels int `json:"cancels,omitempty"`
	// curve: throughput at each worker concurrency (Executions each,
	// fewer below 100 workers: 200 per worker, at least 2,000)
	WorkerCurve []int `json:"worker_curve,omitempty"`
	// history: finished executions already in the tables
	Preload int `json:"preload,omitempty"`
	// history, and comparisons with a peer: alternating rounds of each side
	Rounds int `json:"rounds,omitempty"`
	// big-flow: fan-out widths of 1 -> N -> 1
	BigFlowSizes []int `json:"big_flow_sizes,omitempty"`
	// memory: rounds of Executions executions through a daemon and a
	// Workers-slot worker, each an OS process of its own
	MemoryRounds int `json:"memory_rounds,omitempty"`
	// daemons: Flows root -> DaemonFan flows, their roots finished, then
	// dispatched by each number of daemons in DaemonCurve
	DaemonFan   int   `json:"daemon_fan,omitempty"` // default 50
	DaemonCurve []int `json:"daemon_curve,omitempty"`
	// keys: distinct concurrency keys of limit 1 (default 1000), and a
	// rate on each way's lane, starts a second (default 0: none); a rate
	// that never binds measures what a rate-limited lane's claim costs
	Keys     int `json:"keys,omitempty"`
	LaneRate int `json:"lane_rate,omitempty"`
	// floor (and the floor side of a throughput comparison): loops
	// claiming and finishing Executions rows, FloorBatch at a time
	// (defaults 4 and 100)
	FloorLoops int `json:"floor_loops,omitempty"`
	FloorBatch int `json:"floor_batch,omitempty"`
	// python-worker: executions each side works, and its handlers at
	// once (defaults 5000 and 16); the interpreter and the Python
	// client's directory (defaults: FFD_PYTHON or python3, and
	// clients/python of the checkout)
	LangExecutions int    `json:"lang_executions,omitempty"`
	LangWorkers    int    `json:"lang_workers,omitempty"`
	Python         string `json:"python,omitempty"`
	PythonClient   string `json:"python_client,omitempty"`
}

// Vars are the defaults of Params for the CLI's flags, by the name a
// flag's `default:"${bench_<json name>}"` tag gives, and the scenario
// names (bench_scenarios, for its enum): the CLI spells none of its own.
func Vars() map[string]string {
	var p Params
	p.defaults()
	out := map[string]string{"bench_scenarios": strings.Join(Scenarios, ",")}
	v, t := reflect.ValueOf(p), reflect.TypeOf(p)
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		switch f := v.Field(i).Interface().(type) {
		case int:
			out["bench_"+name] = strconv.Itoa(f)
		case time.Duration:
			out["bench_"+name] = f.String()
		case []int:
			s := make([]string, len(f))
			for j, n := range f {
				s[j] = strconv.Itoa(n)
			}
			out["bench_"+name] = strings.Join(s, ",")
		}
	}
	return out
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
	def(&p.Keys, 1000)
	def(&p.FloorLoops, 4)
	def(&p.FloorBatch, 100)
	def(&p.LangExecutions, 5000)
	def(&p.LangWorkers, 16)
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
	// ChildArgs are the arguments that make this binary run a bench child
	// process (the memory scenario's daemon and worker, which read their
	// role from the environment): `ffd bench-child` for the ffd binary.
	// Default none, for a binary whose main calls RoleMain first (a test
	// binary's TestMain).
	ChildArgs []string
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
	s, ok := find(scenario)
	if !ok {
		return nil, fmt.Errorf("unknown scenario %q: want one of %v", scenario, Scenarios)
	}
	err = s.run(ctx, env, p, r)
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
