//go:build linux

package chaos

import (
	"context"
	"syscall"
	"time"

	"github.com/flowfabric/ffd/internal/store"
)

// Fault kinds, as counted in Report.Faults.
const (
	FaultKillDaemon   = "kill_daemon"
	FaultKillWorker   = "kill_worker"
	FaultKillConsumer = "kill_consumer"
	FaultTerminate    = "terminate_backends"
	FaultCrash        = "crash_restart"
	FaultFreeze       = "freeze_daemon"
)

// cycle is the order faults are drawn in: each kind once per cycle, the
// cycle shuffled, so that a short run sees every kind.
var cycle = []string{FaultTerminate, FaultKillDaemon, FaultFreeze, FaultCrash, FaultKillWorker}

// injectFaults injects one fault at a time, FaultGap apart, until ctx
// ends (a fault under way finishes first).
func (h *harness) injectFaults(ctx context.Context) {
	var order []string
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.cfg.FaultGap):
		}
		if len(order) == 0 {
			for _, f := range h.cfg.Faults {
				if f != FaultKillConsumer { // killConsumers' own loop
					order = append(order, f)
				}
			}
			if len(order) == 0 {
				<-ctx.Done()
				return
			}
			h.mu.Lock()
			h.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			h.mu.Unlock()
		}
		kind := order[0]
		order = order[1:]
		// A fault runs to its end even when the phase ends meanwhile: a
		// frozen daemon is thawed, a crashed server restarted.
		fctx := context.WithoutCancel(ctx)
		switch kind {
		case FaultTerminate:
			h.terminate(fctx)
		case FaultKillDaemon:
			h.kill(h.daemons[h.intn(len(h.daemons))])
		case FaultKillWorker:
			h.kill(h.workers[h.intn(len(h.workers))])
		case FaultFreeze:
			h.freeze(fctx)
		case FaultCrash:
			h.crash(fctx)
		}
		h.mu.Lock()
		h.report.Faults[kind]++
		h.lastFault = time.Now()
		h.mu.Unlock()
		h.cfg.Logf("chaos: %s", kind)
	}
}

// killConsumers SIGKILLs one of the two consumers every few seconds.
func (h *harness) killConsumers(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1500+h.intn(2000)) * time.Millisecond):
		}
		p := h.cursor
		if h.intn(2) == 0 {
			p = h.wal
		}
		if h.kill(p) {
			h.mu.Lock()
			h.report.Faults[FaultKillConsumer]++
			h.mu.Unlock()
		}
	}
}

// intn draws from the fault schedule's generator.
func (h *harness) intn(n int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rng.IntN(n)
}

// kill SIGKILLs p; its supervisor restarts it.
func (h *harness) kill(p *proc) bool {
	if _, ok := p.signal(syscall.SIGKILL); !ok {
		return false
	}
	h.mu.Lock()
	h.kills[p]++
	h.mu.Unlock()
	return true
}

// terminate ends about half of the suite's sessions (daemons' pools and
// listeners, workers, consumers, WAL senders) from the server side.
func (h *harness) terminate(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var n int
	err := h.pool.QueryRow(qctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
		FROM pg_stat_activity
		WHERE pid <> pg_backend_pid() AND application_name LIKE 'chaos-%' AND application_name <> 'chaos-harness'
			AND random() < 0.5`).Scan(&n)
	if err != nil {
		h.cfg.Logf("chaos: terminate backends: %v", err)
	}
}

// crash crash-restarts Postgres: an immediate shutdown, CrashDown of
// downtime, a restart on the same port (crash recovery), then the time
// until the next completion event. On Citus the nodes take turns: a
// worker node, the coordinator, then the other worker nodes, so that a
// run of two crashes has had both kinds.
func (h *harness) crash(ctx context.Context) {
	h.mu.Lock()
	k := h.report.Faults[FaultCrash]
	h.mu.Unlock()
	i := 0 // the one Postgres
	if n := len(h.servers); n > 1 {
		turns := []int{1, 0} // worker node 1, the coordinator, then the rest
		for w := 2; w < n; w++ {
			turns = append(turns, w)
		}
		i = turns[k%n]
	}
	h.serverMu.Lock()
	h.servers[i].Crash()
	time.Sleep(h.cfg.CrashDown)
	restarting := time.Now()
	err := h.startServer(ctx, i)
	h.serverMu.Unlock()
	if err != nil {
		h.violation("Postgres (server %d) did not restart after a crash: %v", i, err)
		return
	}
	if h.cfg.CitusNodes > 0 {
		h.cfg.Logf("chaos: crash-restarted node %d (0: the coordinator)", i)
	}
	h.awaitResume(ctx, restarting, time.Now())
}

// awaitResume waits up to a minute from up, when the crashed server was
// back, for a completion event, and records when it came.
func (h *harness) awaitResume(ctx context.Context, restarting, up time.Time) {
	deadline := up.Add(time.Minute)
	for time.Now().Before(deadline) {
		if at, ok := h.progress.grew(up, time.Now()); ok {
			h.resumed(at.Sub(up))
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The samples are counts over every shard, bounded to a second each:
	// under the suite's load on Citus whole windows of them time out
	// while events commit (as progressedBetween found for a freeze). The
	// events' own times decide. An event's time is its transaction's
	// start, which may come before up in a transaction that committed
	// after it: the events from the restart's start on count.
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	at, ok, err := store.FirstCompletionAfter(qctx, h.pool, restarting)
	cancel()
	switch {
	case err != nil:
		h.violation("no completion event seen within a minute of a crash restart, and none read (within a minute): %v", err)
	case !ok || at.After(deadline):
		h.violation("no completion event within a minute of a crash restart")
	default:
		h.cfg.Logf("chaos: progress resumed %s after a crash restart, read from the events' own times (the samples timed out)",
			max(0, at.Sub(up)).Round(time.Millisecond))
		h.resumed(max(0, at.Sub(up)))
	}
}

// resumed records how long after a crash restart progress resumed.
func (h *harness) resumed(after time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.report.Resume = append(h.report.Resume, after)
}

// freeze stops a daemon with SIGSTOP, trying to catch it inside a
// transaction (a session of its idle in transaction, holding whatever it
// locked), and keeps it frozen past the session guard's bound. The others
// must complete work while it is still frozen.
func (h *harness) freeze(ctx context.Context) {
	d := h.daemons[h.intn(len(h.daemons))]
	inTx := false
	for try := 0; try < 100 && !inTx; try++ {
		if !d.running() {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if _, ok := d.signal(syscall.SIGSTOP); !ok {
			continue
		}
		// A statement in flight finishes; the frozen client then leaves
		// its session idle in the transaction.
		time.Sleep(50 * time.Millisecond)
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var n int
		_ = h.pool.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'idle in transaction'`, "chaos-"+d.name).Scan(&n)
		cancel()
		if n > 0 {
			inTx = true
			break
		}
		d.signal(syscall.SIGCONT)
		time.Sleep(time.Duration(h.intn(40)) * time.Millisecond)
	}
	if !inTx {
		d.signal(syscall.SIGSTOP) // frozen between transactions: still a fault
	}
	bound := h.cfg.guardBound()
	hold := h.cfg.FreezeFor
	if hold == 0 {
		hold = 2*bound + 6*time.Second
	}
	from := time.Now()
	time.Sleep(hold)
	// After the guard's bound (plus the lock waits it ends), the others
	// must have completed something while this daemon is still frozen.
	late := from.Add(bound + 3*time.Second)
	progressed := h.progressedBetween(ctx, late, time.Now())
	// And the guard must have ended the frozen transaction by now,
	// releasing its locks.
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	var stuck int
	err := h.pool.QueryRow(qctx, `SELECT count(*) FROM pg_stat_activity
		WHERE application_name = $1 AND state = 'idle in transaction'`, "chaos-"+d.name).Scan(&stuck)
	cancel()
	d.signal(syscall.SIGCONT)
	if err == nil && stuck > 0 {
		h.violation("%s was frozen %s and still held %d sessions idle in a transaction", d.name, time.Since(from).Round(time.Second), stuck)
	}
	h.mu.Lock()
	if inTx {
		h.report.FrozenInTransaction++
	}
	h.mu.Unlock()
	if !progressed {
		h.violation("no completion event while %s was frozen (in a transaction: %v), from %s after the freeze until it was thawed",
			d.name, inTx, late.Sub(from))
	}
}

// progressedBetween says whether a completion event occurred between
// from and to: seen grow by the monitor's samples, or else found by the
// events' own times. A sample is a count over every shard of a
// distributed Postgres, bounded to a second; under the suite's load on
// Citus (a load average near 40 after a crash restart) whole windows of
// samples timed out while events went on committing, and the check took
// the missing samples for no progress.
func (h *harness) progressedBetween(ctx context.Context, from, to time.Time) bool {
	if _, ok := h.progress.grew(from, to); ok {
		return true
	}
	qctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := store.CompletionsBetween(qctx, h.pool, from, to)
	if err != nil {
		h.cfg.Logf("chaos: read completions between %s and %s (within a minute): %v", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano), err)
		return false
	}
	return n > 0
}
