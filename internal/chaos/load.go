//go:build linux

package chaos

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/bound"
	"github.com/flowfabric/ffd/internal/store"
)

// RoleHog makes a test binary run HogMain: one busy loop, the machine's
// load for the frozen-under-load scenario.
const RoleHog = "hog"

// HogMain spins one CPU until SIGTERM (exit 0) or SIGKILL. A test
// binary calls it from TestMain when EnvRole is RoleHog.
func HogMain() int {
	runtime.GOMAXPROCS(1)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	var spins uint64
	for {
		select {
		case <-stop:
			return 0
		default:
		}
		for range 1 << 20 {
			spins++
		}
	}
}

// startHogs starts cfg.Hogs busy loops, each its own process (one
// goroutine per hog in this process would be held to GOMAXPROCS
// threads, and load the machine by that much only).
func (h *harness) startHogs(ctx context.Context) {
	for i := range h.cfg.Hogs {
		p := newProc(h.cfg.Dir, fmt.Sprintf("hog-%d", i+1), h.cfg.Self, nil, []string{EnvRole + "=" + RoleHog}, DefaultRestartDelay)
		h.hogs = append(h.hogs, p)
		go p.supervise(ctx)
	}
}

// stopHogs ends the busy loops.
func (h *harness) stopHogs() {
	var wg sync.WaitGroup
	for _, p := range h.hogs {
		wg.Go(func() { p.stop(syscall.SIGTERM, 5*time.Second) })
	}
	wg.Wait()
	h.hogs = nil
}

// The worker processes append a line "<execution id> <lease epoch>" to
// their success log (envSuccessLog) for each handler run that returned
// success, before the result is handed to the worker to record; the
// harness then checks that each such success was recorded.
const envSuccessLog = "FFD_CHAOS_SUCCESS_LOG"

// successLog is a worker process's log of successes; nil: none kept.
var successLog struct {
	mu sync.Mutex
	f  *os.File
}

// openSuccessLog opens the log named by envSuccessLog, if any.
func openSuccessLog() error {
	path := os.Getenv(envSuccessLog)
	if path == "" {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("open success log: %w", err)
	}
	successLog.f = f
	return nil
}

// logSuccess records that job's handler succeeded. One write per line,
// O_APPEND: a process killed mid-way leaves whole lines.
func logSuccess(job *ffd.Job) {
	successLog.mu.Lock()
	defer successLog.mu.Unlock()
	if successLog.f != nil {
		_, _ = fmt.Fprintf(successLog.f, "%s %d\n", job.ID, job.LeaseEpoch)
	}
}

// readSuccesses reads every worker process's success log.
func (h *harness) readSuccesses() ([]store.LeaseRef, error) {
	paths, err := filepath.Glob(filepath.Join(h.cfg.Dir, "successes-*.log"))
	if err != nil {
		return nil, err
	}
	var out []store.LeaseRef
	for _, path := range paths {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			id, epoch, ok := strings.Cut(sc.Text(), " ")
			if !ok {
				continue // a line cut by a SIGKILL
			}
			x, err := ffd.ParseExecutionID(id)
			e, err2 := strconv.ParseInt(epoch, 10, 64)
			if err != nil || err2 != nil {
				continue
			}
			out = append(out, store.LeaseRef{ID: x, Epoch: e})
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// verifySuccesses checks that the work handlers did was kept: no
// execution whose handler succeeded ended expired or failed (its kind
// always succeeds, so it could only have lost its leases). When strict
// (no fault killed a worker or took its sessions away) each success must
// also have been recorded under the lease it ran with, unless its
// execution was cancelled meanwhile.
func (h *harness) verifySuccesses(ctx context.Context, strict bool) {
	refs, err := h.readSuccesses()
	if err != nil {
		h.violation("read the workers' success logs: %v", err)
		return
	}
	var outs []store.LeaseOutcome
	for len(refs) > 0 {
		n := min(len(refs), 5000)
		qctx, cancel := context.WithTimeout(ctx, time.Minute)
		o, err := store.LeaseOutcomes(qctx, h.pool, refs[:n])
		cancel()
		if err != nil {
			h.violation("read how the successes' leases ended: %v", err)
			return
		}
		outs, refs = append(outs, o...), refs[n:]
	}
	h.report.HandlerSuccesses = len(outs)
	ended := map[ffd.ExecutionID]bool{}
	var examples []string
	for _, o := range outs {
		if (o.State == ffd.StateExpired || o.State == ffd.StateFailed) && !ended[o.Lease.ID] {
			ended[o.Lease.ID] = true
			h.report.SucceededEndedOtherwise++
			examples = append(examples, fmt.Sprintf("%s ended %s", o.Lease.ID, o.State))
		}
		if o.Outcome != ffd.AttemptSucceeded && o.State != ffd.StateCancelled {
			h.report.SuccessesNotRecorded++
			if strict {
				examples = append(examples, fmt.Sprintf("%s epoch %d: success recorded as %q (execution %s)", o.Lease.ID, o.Lease.Epoch, o.Outcome, o.State))
			}
		}
	}
	if h.report.SucceededEndedOtherwise > 0 || (strict && h.report.SuccessesNotRecorded > 0) {
		h.violation("%d executions whose handler succeeded ended expired or failed, %d successes not recorded under their lease (of %d); e.g. %s",
			h.report.SucceededEndedOtherwise, h.report.SuccessesNotRecorded, len(outs), strings.Join(examples[:min(len(examples), 5)], "; "))
	}
}

// connectionBudget is what the suite's processes may hold at once, by
// their configured pools (docs/scaling.md, "Connection budget"): each
// daemon its pool (ffd run's default 10) and its LISTEN; each worker
// process its pool and its LISTEN; the cursor consumer pgx's default pool
// and its LISTEN; the WAL consumer one replication connection per node
// it streams from; and the harness's own pool.
func (h *harness) connectionBudget() int {
	const daemonPool, workerPool, harnessPool = bound.DefaultPoolMaxConns, workerMaxConns, harnessMaxConns
	cursorPool := max(4, runtime.NumCPU())
	walNodes := max(1, h.cfg.CitusNodes)
	return h.cfg.Daemons*(daemonPool+1) + h.cfg.Workers*(workerPool+1) + cursorPool + 1 + walNodes + harnessPool
}

// sampleLoad samples, until ctx ends, the machine's load and the
// sessions connected to the (first) server: their peak goes in the
// report.
func (h *harness) sampleLoad(ctx context.Context) {
	every(ctx, 250*time.Millisecond, func() {
		if load, err := loadAverage(); err == nil {
			h.mu.Lock()
			h.report.PeakLoad = max(h.report.PeakLoad, load)
			h.mu.Unlock()
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var n int
		err := h.pool.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
			WHERE backend_type IN ('client backend', 'walsender')`).Scan(&n)
		cancel()
		if err == nil {
			h.mu.Lock()
			h.report.PeakConnections = max(h.report.PeakConnections, n)
			h.mu.Unlock()
		}
	})
}

// paced runs f until ctx ends, waiting between runs interval or four
// times what the last run took, whichever is longer: a harness read that
// spans every shard of a distributed Postgres (a count of the outboxes)
// must not take the cores the system under test runs on.
func paced(ctx context.Context, interval time.Duration, f func()) {
	for {
		start := time.Now()
		f()
		t := time.NewTimer(pace(interval, time.Since(start)))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// pace is the wait after a read that took took: interval, or four times
// took when that is longer.
func pace(interval, took time.Duration) time.Duration { return max(interval, 4*took) }

// every runs f every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f()
	}
}

// sessionsOpened is how many sessions the server has accepted, over every
// database, since its statistics began (Postgres 14 and later).
func (h *harness) sessionsOpened(ctx context.Context) (int64, error) {
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var n int64
	err := h.pool.QueryRow(qctx, `SELECT coalesce(sum(sessions), 0)::bigint FROM pg_stat_database`).Scan(&n)
	return n, err
}

// loadAverage is the machine's one-minute load average.
func loadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), " ")
	return strconv.ParseFloat(first, 64)
}
