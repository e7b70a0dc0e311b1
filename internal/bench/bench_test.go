package bench_test

import (
	"context"
	"os"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/bench"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) {
	bench.RoleMain() // the memory scenario's daemon and worker processes
	testdb.Main(m)
}

// Every scenario runs at a tiny size: the run must be correct (counts and
// invariants are checked inside); timings are not asserted here.
func TestScenariosTiny(t *testing.T) {
	t.Parallel()
	tiny := bench.Params{Executions: 300, Workers: 20, Flows: 10, ChainLength: 4, FanWidth: 30, Repeats: 1,
		FlowSizes: []int{4, 20}, Leases: 30, LeaseTTL: time.Second, Burst: 300, SweepInterval: 200 * time.Millisecond, Cancels: 10, Creates: 20, HopChains: 2, HopLength: 4,
		WorkerCurve: []int{1, 4}, Preload: 500, Rounds: 1, BigFlowSizes: []int{5, 50}, MemoryRounds: 2, DaemonCurve: []int{1, 2}, DaemonFan: 5,
		LangExecutions: 200, LangWorkers: 4}
	for _, name := range bench.Scenarios {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			db := testdb.New(t)
			env := bench.NewEnv(db.Pool, db.URL, nil)
			env.NewDatabase = func(context.Context) (*pgxpool.Pool, string, func(), error) {
				other := testdb.New(t)
				return other.Pool, other.URL, func() {}, nil
			}
			params := tiny
			if name == "daemons" {
				// Enough hops per round that the server's CPU, counted in
				// 10 ms ticks, is seen for each number of daemons even on
				// a busy machine (50 hops could pass within one tick).
				params.DaemonFan = 40
			}
			r, err := bench.Run(ctx, env, name, params)
			if err != nil {
				t.Fatal(err)
			}
			// The floor is a yardstick with no goal of its own.
			if r.Scenario != name || len(r.Figures) == 0 || (len(r.Targets) == 0) != (name == "floor") || r.Machine.Cores == 0 || r.Machine.PostgresVersion == "" {
				t.Fatalf("incomplete report: %+v", r)
			}
			if name == "floor" {
				var tables int
				if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'floor_%'`).Scan(&tables); err != nil || tables != 0 {
					t.Fatalf("the floor left %d tables behind (%v), want its own dropped", tables, err)
				}
				if v, _ := r.Figures["executions_per_second"].(float64); v <= 0 {
					t.Fatalf("floor executions_per_second = %v, want a measured rate", r.Figures["executions_per_second"])
				}
			}
			// The daemon curve says where the cores went when it can see
			// the server: on Linux, with the harness's own cluster.
			if name == "daemons" && runtime.GOOS == "linux" && os.Getenv("FFD_TEST_DATABASE_URL") == "" {
				if pg, ok := r.Figures["postgres_cores_by_daemons"].(map[string]float64); !ok || len(pg) != 2 || pg["1"] <= 0 {
					t.Fatalf("postgres_cores_by_daemons = %v, want a positive figure for each of 1 and 2 daemons", r.Figures["postgres_cores_by_daemons"])
				}
			}
			// Scenarios that run the daemon leave nothing undispatched.
			withDaemon := !slices.Contains([]string{"enqueue", "cancel-flow", "cancel-running"}, name)
			if err := store.CheckQuiescent(ctx, db.Pool); err != nil && withDaemon {
				t.Fatalf("invariants at rest: %v", err)
			}
			if err := env.Cleanup(ctx); err != nil {
				t.Fatal(err)
			}
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_flow)
				+ (SELECT count(*) FROM ff_completion_event) + (SELECT count(*) FROM ff_lease_event)`).Scan(&left); err != nil || left != 0 {
				t.Fatalf("cleanup left %d rows (%v)", left, err)
			}
		})
	}
}
