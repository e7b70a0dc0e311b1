//go:build linux

package chaos_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/chaos"
)

// The long form: go test ./internal/chaos -run TestFaultSuite -timeout 60m
// -chaos.duration 10m -chaos.idle-in-tx 0 (docs/development.md). On a
// Citus cluster it starts itself: -chaos.citus-nodes 2 (docs/scaling.md).
var (
	duration  = flag.Duration("chaos.duration", chaos.DefaultDuration, "length of the fault phase")
	seed      = flag.Uint64("chaos.seed", 1, "seed of the DAGs and the fault schedule")
	daemons   = flag.Int("chaos.daemons", chaos.DefaultDaemons, "daemon processes")
	workers   = flag.Int("chaos.workers", chaos.DefaultWorkers, "worker processes")
	idleInTx  = flag.Duration("chaos.idle-in-tx", chaos.DefaultIdleInTx, "the daemons' idle-in-transaction timeout; 0 keeps ffd's default")
	crash     = flag.Duration("chaos.crash-down", chaos.DefaultCrashDown, "how long Postgres stays down after a crash")
	report    = flag.String("chaos.report", "", "write the report as JSON to this file")
	citus     = flag.Int("chaos.citus-nodes", 0, "run on a Citus cluster of a coordinator and this many worker nodes (the citus extension installed for the local PostgreSQL)")
	keep      = flag.Bool("chaos.keep", false, "keep the working directory (cluster, logs, consumer output) even when the test passes")
	freezeFor = flag.Duration("chaos.freeze-for", 30*time.Second, "TestFrozenDaemonUnderLoad: how long each freeze lasts")
	hogs      = flag.Int("chaos.hogs", 8, "TestFrozenDaemonUnderLoad: busy-looping processes per CPU")
)

func TestMain(m *testing.M) {
	switch os.Getenv(chaos.EnvRole) {
	case chaos.RoleWorker:
		os.Exit(chaos.WorkerMain())
	case chaos.RoleHog:
		os.Exit(chaos.HogMain())
	}
	os.Exit(m.Run())
}

// Daemons, workers and consumers as separate processes over random DAGs,
// while daemons, workers and consumers are SIGKILLed, sessions terminated,
// Postgres crash-restarted and a daemon frozen inside a transaction: no
// invariant breaks, every DAG ends as its structure implies, and each
// consumer sees every event.
func TestFaultSuite(t *testing.T) {
	t.Parallel()
	rep := runSuite(t, chaos.Config{Duration: *duration, IdleInTransactionTimeout: *idleInTx})
	// A run that injected nothing or submitted nothing proves nothing.
	for _, kind := range []string{chaos.FaultKillDaemon, chaos.FaultKillWorker, chaos.FaultKillConsumer,
		chaos.FaultTerminate, chaos.FaultCrash, chaos.FaultFreeze} {
		if rep.Faults[kind] == 0 {
			t.Errorf("no %s fault was injected: %v", kind, rep.Faults)
		}
	}
	if len(rep.Resume) != rep.Faults[chaos.FaultCrash] {
		t.Errorf("progress resumed after %d of %d crash restarts", len(rep.Resume), rep.Faults[chaos.FaultCrash])
	}
}

// A daemon frozen inside a transaction for 30 s (past ffd's own session
// guard, 15 s) while busy loops on every core load the machine, again
// and again: the workers keep their leases and record every result (no
// execution whose handler succeeded ends other than completed, no
// success goes unrecorded), and the processes stay within their pools
// (no reconnect storm). Not parallel: the load is the point, and the
// other test of the package would share it.
//
// The long form: -run TestFrozenDaemonUnderLoad -chaos.duration 5m
// (docs/development.md).
func TestFrozenDaemonUnderLoad(t *testing.T) {
	rep := runSuite(t, chaos.Config{Duration: *duration, Faults: []string{chaos.FaultFreeze},
		FreezeFor: *freezeFor, Hogs: *hogs * runtime.NumCPU(), LongRuns: true})
	if rep.Faults[chaos.FaultFreeze] == 0 || rep.FrozenInTransaction == 0 {
		t.Errorf("%d freezes, %d of them inside a transaction; want at least one inside", rep.Faults[chaos.FaultFreeze], rep.FrozenInTransaction)
	}
	if rep.HandlerSuccesses == 0 {
		t.Errorf("no handler success was logged: the check proves nothing")
	}
	t.Logf("under load %.1f at its peak: %d successes, %d ended otherwise, %d not recorded; %d sessions at most (budget %d), %d opened; drained in %s",
		rep.PeakLoad, rep.HandlerSuccesses, rep.SucceededEndedOtherwise, rep.SuccessesNotRecorded,
		rep.PeakConnections, rep.ConnectionBudget, rep.SessionsOpened, rep.Drain)
}

// runSuite builds ffd and runs the suite with cfg (the flags fill in the
// rest), failing the test on every violation and on a run that did
// nothing.
func runSuite(t *testing.T, cfg chaos.Config) *chaos.Report {
	t.Helper()
	dir, err := os.MkdirTemp("", "ffd-chaos-")
	if err != nil {
		t.Fatal(err)
	}
	// The private server runs as the postgres OS user under root.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *keep {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	ffdBin := filepath.Join(dir, "ffd")
	build := exec.Command("go", "build", "-o", ffdBin, "../../cmd/ffd")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build ffd: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Duration+10*time.Minute)
	defer cancel()
	cfg.FFD, cfg.Self, cfg.Dir, cfg.Seed = ffdBin, os.Args[0], dir, *seed
	cfg.Daemons, cfg.Workers, cfg.CrashDown, cfg.CitusNodes, cfg.Logf = *daemons, *workers, *crash, *citus, t.Logf
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("fault suite did not run: %v", err)
	}
	js, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("report:\n%s", js)
	if *report != "" {
		if err := os.WriteFile(*report, js, 0o644); err != nil {
			t.Error(err)
		}
	}
	for _, v := range rep.Violations {
		t.Errorf("violation: %s", v)
	}
	if rep.FlowsAcked == 0 || rep.Executions == 0 {
		t.Errorf("nothing ran: %d flows acknowledged, %d executions", rep.FlowsAcked, rep.Executions)
	}
	return rep
}
