//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// proc is one supervised OS process: restarted after restartDelay whenever
// it exits, until the supervisor stops, as systemd's Restart=always would.
type proc struct {
	name    string
	path    string
	args    []string
	env     []string
	logPath string
	outPath string // stdout, when apart from the log (a consumer's output)
	delay   time.Duration

	mu       sync.Mutex
	cmd      *exec.Cmd
	frozen   bool
	starts   int
	exits    []exit // how each run ended, for the report
	stopping bool
	done     chan struct{}
}

func newProc(dir, name, path string, args, env []string, delay time.Duration) *proc {
	return &proc{name: name, path: path, args: args, env: env, delay: delay,
		logPath: filepath.Join(dir, name+".log"), done: make(chan struct{})}
}

// supervise runs the process until stop is called.
func (p *proc) supervise(ctx context.Context) {
	defer close(p.done)
	for {
		p.mu.Lock()
		if p.stopping || ctx.Err() != nil {
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		// Linux sends the parent-death signal when the *thread* that
		// forked exits, not the process. A Go thread exits when a
		// goroutine returns while locked to it (the Postgres servers'
		// do, at each crash restart), and a thread that once forked a
		// process may be locked by such a goroutine later: a daemon
		// died of a SIGKILL nobody sent that way. So each run is forked
		// from a thread locked for its whole life and retired after it.
		ran := make(chan struct{})
		go func() {
			defer close(ran)
			runtime.LockOSThread()
			p.runOnce()
		}()
		<-ran
		select {
		case <-ctx.Done():
			return
		case <-time.After(p.delay):
		}
	}
}

// runOnce starts the process and waits for it to end, recording how.
func (p *proc) runOnce() {
	p.mu.Lock()
	if p.stopping {
		p.mu.Unlock()
		return
	}
	cmd, err := p.start()
	if err != nil {
		p.exits = append(p.exits, exit{how: "start: " + err.Error()})
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	began := time.Now()
	err = cmd.Wait()
	p.mu.Lock()
	p.cmd = nil
	p.frozen = false
	p.exits = append(p.exits, exit{how: exitText(err), ran: time.Since(began)})
	p.mu.Unlock()
}

// start launches one run; p.mu is held.
func (p *proc) start() (*exec.Cmd, error) {
	logFile, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(p.path, p.args...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	if p.outPath != "" {
		out, err := os.OpenFile(p.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		defer out.Close()
		cmd.Stdout = out
	}
	// Own process group, so that the suite's signals reach only it; and die
	// with the suite if the suite dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd = cmd
	p.starts++
	return cmd, nil
}

// exit is how one run of a process ended, and how long it had run.
type exit struct {
	how string
	ran time.Duration
}

func exitText(err error) string {
	if err == nil {
		return "exit 0"
	}
	if ee, ok := err.(*exec.ExitError); ok {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
		return fmt.Sprintf("exit %d", ee.ExitCode())
	}
	return err.Error()
}

// signal sends sig to the running process; false when none runs.
func (p *proc) signal(sig syscall.Signal) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0, false
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return 0, false
	}
	switch sig {
	case syscall.SIGSTOP:
		p.frozen = true
	case syscall.SIGCONT:
		p.frozen = false
	}
	return p.cmd.Process.Pid, true
}

// running reports whether a run is up and not frozen.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !p.frozen
}

// stop ends supervision: the process gets sig (thawed first if frozen),
// and SIGKILL if it has not exited within grace.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	cmd := p.cmd
	if cmd != nil && p.frozen {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		p.frozen = false
	}
	p.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Signal(sig)
	}
	select {
	case <-p.done:
		return
	case <-time.After(grace):
	}
	p.mu.Lock()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
	}
	p.mu.Unlock()
	<-p.done
}

// history is how many times the process started and how each run ended.
func (p *proc) history() (int, []exit) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts, append([]exit(nil), p.exits...)
}

// logTail is the end of the process's log, for failure messages.
func (p *proc) logTail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
