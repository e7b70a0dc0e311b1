package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/store"
)

// The memory scenario runs the daemon and the worker as processes of their
// own, so that each one's resident set can be read from outside. They are
// the bench's own binary started with Env.ChildArgs and EnvRole set: ffd's
// hidden `bench-child` command, or a test binary whose TestMain calls
// RoleMain first thing.
const (
	EnvRole        = "FFD_BENCH_ROLE" // RoleDaemon or RoleWorker
	RoleDaemon     = "daemon"
	RoleWorker     = "worker"
	envRoleURL     = "FFD_BENCH_DATABASE_URL"
	envRoleLane    = "FFD_BENCH_LANE"
	envRoleSlots   = "FFD_BENCH_SLOTS"
	envRoleSweep   = "FFD_BENCH_SWEEP"
	roleStopPeriod = 10 * time.Second
)

// RoleMain runs a bench process and exits when EnvRole is set; otherwise
// it returns at once. It runs until SIGTERM or SIGINT.
func RoleMain() {
	role := os.Getenv(EnvRole)
	if role == "" {
		return
	}
	log, _ := zap.NewProduction(zap.IncreaseLevel(zap.WarnLevel))
	if err := runRole(role, log); err != nil {
		log.Error("bench process failed", zap.String("role", role), zap.Error(err))
		os.Exit(1)
	}
	os.Exit(0)
}

func runRole(role string, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg, err := pgxpool.ParseConfig(os.Getenv(envRoleURL))
	if err != nil {
		return fmt.Errorf("parse %s: %w", envRoleURL, err)
	}
	slots, _ := strconv.Atoi(os.Getenv(envRoleSlots))
	cfg.MaxConns = int32(max(20, min(slots/2, 60))) // as the in-process bench sizes its pool
	if err := ffd.ConfigurePool(cfg, nil); err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	switch role {
	case RoleDaemon:
		sweep, err := time.ParseDuration(os.Getenv(envRoleSweep))
		if err != nil {
			return fmt.Errorf("parse %s: %w", envRoleSweep, err)
		}
		d, err := daemon.New(daemon.Config{Pool: pool, SweepInterval: sweep, Logger: log, Supervisor: daemon.NopSupervisor{}})
		if err != nil {
			return err
		}
		if err := d.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	case RoleWorker:
		c, err := ffd.NewClient(pool, &ffd.Config{Logger: log})
		if err != nil {
			return err
		}
		w, err := ffd.NewWorker(c, ffd.WorkerConfig{Lanes: []string{os.Getenv(envRoleLane)}, Concurrency: slots, ID: "bench-memory",
			PollInterval: 100 * time.Millisecond, Handler: noop})
		if err != nil {
			return err
		}
		return w.Run(ctx, roleStopPeriod)
	default:
		return fmt.Errorf("%s=%q: want %s or %s", EnvRole, role, RoleDaemon, RoleWorker)
	}
}

// child is one bench process.
type child struct {
	role   string
	cmd    *exec.Cmd
	stderr *bytes.Buffer
	done   chan error
}

func startChild(role string, args, env []string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the bench's own binary: %w", err)
	}
	c := &child{role: role, stderr: &bytes.Buffer{}, done: make(chan error, 1)}
	c.cmd = exec.Command(self, args...)
	c.cmd.Env = append(os.Environ(), append(env, EnvRole+"="+role)...)
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = childAttr()
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the %s process: %w", role, err)
	}
	go func() { c.done <- c.cmd.Wait() }()
	return c, nil
}

// alive fails when the process has exited.
func (c *child) alive() error {
	select {
	case err := <-c.done:
		c.done <- err
		return fmt.Errorf("the %s process exited (%v): %s", c.role, err, lastLine(c.stderr.String()))
	default:
		return nil
	}
}

// stop sends SIGTERM and waits; a process that does not stop is killed.
func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-c.done:
		c.done <- err
		if err != nil {
			return fmt.Errorf("the %s process: %v: %s", c.role, err, lastLine(c.stderr.String()))
		}
		return nil
	case <-time.After(roleStopPeriod + 5*time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
		return fmt.Errorf("the %s process did not stop on SIGTERM", c.role)
	}
}

// rss reads the process's resident set and its peak, in MiB.
func (c *child) rss() (now, peak float64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", c.cmd.Process.Pid))
	if err != nil {
		return 0, 0, fmt.Errorf("read the %s process's memory (Linux only): %w", c.role, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse %s %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			now = kb / 1024
		} else {
			peak = kb / 1024
		}
	}
	return now, peak, sc.Err()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// memory: MemoryRounds rounds of Executions executions through a daemon
// process and a Workers-slot worker process; after each round, the
// resident set of each. Memory that grows with the work done shows as a
// resident set that climbs round after round.
func memory(ctx context.Context, env *Env, p Params, r *Report) error {
	if runtime.GOOS != "linux" {
		return errors.New("the memory scenario reads each process's resident set from /proc: it runs on Linux only")
	}
	lane := env.lane("memory")
	common := []string{envRoleURL + "=" + env.URL, envRoleLane + "=" + lane,
		envRoleSlots + "=" + strconv.Itoa(p.Workers), envRoleSweep + "=" + p.SweepInterval.String()}
	var kids []*child
	defer func() {
		for _, k := range kids {
			_ = k.stop()
		}
	}()
	for _, role := range []string{RoleDaemon, RoleWorker} {
		k, err := startChild(role, env.ChildArgs, common)
		if err != nil {
			return err
		}
		kids = append(kids, k)
	}
	rounds := map[string][]float64{RoleDaemon: nil, RoleWorker: nil}
	for round := range p.MemoryRounds {
		if err := env.createMany(ctx, ffdtype.CreateParams{Lane: lane}, p.Executions); err != nil {
			return err
		}
		err := pollUntil(ctx, fmt.Sprintf("round %d to complete", round+1), 10*time.Minute, 100*time.Millisecond, func() (bool, error) {
			for _, k := range kids {
				if err := k.alive(); err != nil {
					return false, err
				}
			}
			n, err := env.left(ctx, lane)
			return n == 0, err
		})
		if err != nil {
			return err
		}
		if err := env.settle(ctx); err != nil {
			return err
		}
		for _, k := range kids {
			now, _, err := k.rss()
			if err != nil {
				return err
			}
			rounds[k.role] = append(rounds[k.role], now)
		}
	}
	peaks := map[string]float64{}
	for _, k := range kids {
		_, peak, err := k.rss()
		if err != nil {
			return err
		}
		peaks[k.role] = peak
	}
	for _, k := range kids {
		if err := k.stop(); err != nil {
			return err
		}
	}
	kids = nil
	r.Figures["rss_mib_after_each_round"] = rounds
	r.Figures["peak_rss_mib"] = peaks
	r.Figures["executions_processed"] = p.MemoryRounds * p.Executions
	for _, role := range []string{RoleDaemon, RoleWorker} {
		rs := rounds[role]
		growth := rs[len(rs)-1] / rs[0]
		r.Targets = append(r.Targets, target(role+"_rss_last_vs_first_round", "<= 1.25 (no growth with work done)", growth, "x", growth <= 1.25))
	}
	n, err := store.CountInLanes(ctx, env.Pool, ffdtype.StateCompleted, lane)
	if err != nil {
		return err
	}
	if n != p.MemoryRounds*p.Executions {
		return fmt.Errorf("%d of %d executions completed", n, p.MemoryRounds*p.Executions)
	}
	return env.checkInvariants(ctx)
}
