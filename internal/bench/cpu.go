package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// cpuMeter reads the CPU time used by the Postgres server and by this
// process, to say where a round's cores went. It works where /proc does
// and the server runs on this machine; elsewhere ok is false and the
// figures are left out.
type cpuMeter struct {
	postmaster int
}

// clockTicks is the unit of /proc's CPU times: USER_HZ, 100 on Linux.
const clockTicks = 100

// newCPUMeter finds the server's postmaster: the parent of the backend
// serving one of pool's connections, if it is a local postgres process.
func newCPUMeter(ctx context.Context, pool *pgxpool.Pool) (m *cpuMeter, ok bool) {
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return nil, false
	}
	st, err := readStat(pid)
	if err != nil || !strings.HasPrefix(st.comm, "postgres") {
		return nil, false
	}
	return &cpuMeter{postmaster: st.ppid}, true
}

// cpuSample is cumulative CPU time at one instant.
type cpuSample struct {
	at             time.Time
	server, client time.Duration
}

// sample reads the server's CPU (the postmaster, its live children, and
// the children it has reaped) and this process's.
func (m *cpuMeter) sample() (cpuSample, error) {
	s := cpuSample{at: time.Now()}
	pm, err := readStat(m.postmaster)
	if err != nil {
		return s, err
	}
	ticks := pm.own + pm.children
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return s, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		st, err := readStat(pid)
		if err == nil && st.ppid == m.postmaster {
			ticks += st.own
		}
	}
	self, err := readStat(os.Getpid())
	if err != nil {
		return s, err
	}
	s.server = time.Duration(ticks) * time.Second / clockTicks
	s.client = time.Duration(self.own) * time.Second / clockTicks
	return s, nil
}

// cores is the CPU each side used between two samples, in cores.
func (a cpuSample) cores(b cpuSample) (server, client float64) {
	wall := b.at.Sub(a.at).Seconds()
	return (b.server - a.server).Seconds() / wall, (b.client - a.client).Seconds() / wall
}

// procStat is what cpuMeter needs of /proc/<pid>/stat.
type procStat struct {
	comm     string
	ppid     int
	own      int64 // utime + stime, in clock ticks
	children int64 // cutime + cstime: reaped children's
}

func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, err
	}
	// The command sits in parentheses and may hold spaces: fields count
	// from the last ')'.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("read /proc/%d/stat: no command", pid)
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("read /proc/%d/stat: %d fields", pid, len(f))
	}
	// f[0] is field 3 (state): ppid is field 4, utime..cstime 14..17.
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i-3], 10, 64); return v }
	return procStat{comm: s[open+1 : end], ppid: int(n(4)), own: n(14) + n(15), children: n(16) + n(17)}, nil
}
