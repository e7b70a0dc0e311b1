// Package clients_test runs the clients in other languages (clients/python,
// clients/typescript) and the mixed example (examples/mixed) against a
// real Postgres and a real ffd daemon serving the worker protocol.
package clients_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

const token = "clients-test-token-0123456789"

// env is a database, a daemon over it and the worker protocol's address.
type env struct {
	*testdb.Fixture
	client *ffd.Client
	api    string
}

func start(t *testing.T) *env {
	t.Helper()
	f := testdb.Setup(t, 10*time.Minute)
	client, err := ffd.NewClient(f.Pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	d, err := ffd.NewDaemon(f.Pool, &ffd.DaemonConfig{SweepInterval: 200 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop(context.Background()) })
	api, err := ffd.NewWorkerAPI(client, ffd.WorkerAPIConfig{Tokens: []string{token}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(api)
	t.Cleanup(func() {
		srv.Close()
		_ = api.Close()
	})
	return &env{Fixture: f, client: client, api: srv.URL}
}

// environ is what the programs under test read.
func (e *env) environ() []string {
	py, _ := filepath.Abs("python")
	return append(os.Environ(), "FFD_CLIENT_DATABASE_URL="+e.DB.URL, "FFD_CLIENT_API_URL="+e.api,
		"FFD_CLIENT_TOKEN="+token, "PYTHONPATH="+py, "PYTHONUNBUFFERED=1")
}

// python is an interpreter that has psycopg 3: FFD_PYTHON, python3, or
// Debian's (./test.sh --install installs python3-psycopg there).
func python(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("FFD_PYTHON"), "python3", "/usr/bin/python3"} {
		if p != "" && exec.Command(p, "-c", "import psycopg").Run() == nil {
			return p
		}
	}
	t.Fatal("no python3 with psycopg 3 on this machine: ./test.sh --install installs Debian's python3-psycopg (or set FFD_PYTHON)")
	return ""
}

// typescript compiles clients/typescript (and the example's worker) once
// and returns its directory; its packages come from `npm ci`, which
// ./test.sh --install runs.
func typescript(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs("typescript")
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Fatalf("clients/typescript has no node_modules (%v): run ./test.sh --install, or npm ci there", err)
	}
	run(t, exec.Command(tsc, "-p", dir))
	return dir
}

// run runs cmd to its end and fails the test with its output unless it
// exits 0.
func run(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out.String())
	}
	return out.String()
}

func TestPythonClient(t *testing.T) {
	t.Parallel()
	e := start(t)
	cmd := exec.CommandContext(e.Ctx, python(t), "-m", "unittest", "discover", "-v", "-s", "python/tests")
	cmd.Env = e.environ()
	t.Log(run(t, cmd))
}

func TestTypeScriptClient(t *testing.T) {
	t.Parallel()
	e := start(t)
	dir := typescript(t)
	cmd := exec.CommandContext(e.Ctx, "node", "--test", "--test-concurrency=1", filepath.Join(dir, "dist", "test"))
	cmd.Env = e.environ()
	t.Log(run(t, cmd))
}

// proc is a worker program running beside the test, its output kept.
type proc struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (p *proc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc starts cmd; the test's end stops it (SIGTERM, then a kill).
func startProc(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", cmd.Path, err)
	}
	go func() {
		cmd.Wait() //nolint:errcheck // its exit is read through done
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // it may have exited
			<-p.done
		}
	})
	return p
}

// waitOutput waits until p has printed want.
func (e *env) waitOutput(p *proc, want string) {
	e.T.Helper()
	e.WaitFor(fmt.Sprintf("%q from %s", want, filepath.Base(p.cmd.Path)), func() bool {
		select {
		case <-p.done:
			e.T.Fatalf("%s exited before printing %q:\n%s", p.cmd.Path, want, p.output())
		default:
		}
		return strings.Contains(p.output(), want)
	})
}

// The mixed flow of docs/languages.md: a Go step, a Python step and a
// TypeScript step, each claimed by its own language's worker, each
// failing once and retried, each handed the result before it; then a
// cancel reaching a running Python handler.
func TestMixedFlow(t *testing.T) {
	t.Parallel()
	e := start(t)
	ts := typescript(t)
	workerEnv := append(e.environ(), "FFD_API_URL="+e.api, "FFD_WORKER_TOKEN="+token)
	py := exec.Command(python(t), "python/examples/mixed_worker.py")
	py.Env = workerEnv
	pyProc := startProc(t, py)
	node := exec.Command("node", filepath.Join(ts, "dist", "examples", "mixed-worker.js"))
	node.Env = workerEnv
	nodeProc := startProc(t, node)
	e.waitOutput(pyProc, "ready")
	e.waitOutput(nodeProc, "ready")

	goRun := exec.CommandContext(e.Ctx, goTool(t), "run", "../examples/mixed")
	goRun.Env = append(os.Environ(), "FFD_DATABASE_URL="+e.DB.URL)
	out := run(t, goRun)
	if !strings.Contains(out, `"by":["go","python","typescript"]`) {
		t.Fatalf("the mixed example printed:\n%s\nwant the result handled by go, python and typescript", out)
	}
	t.Log(out)

	var sub struct {
		FlowID     string            `json:"flow_id"`
		Executions map[string]string `json:"executions"`
	}
	var raw []byte
	if err := e.Pool.QueryRow(e.Ctx, `SELECT ffd_submit_flow('{"nodes": [{"ref": "hold", "lane": "mixed.py", "kind": "hold", "lease_ttl": "10s"}]}')::text`).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &sub); err != nil {
		t.Fatal(err)
	}
	hold := sub.Executions["hold"]
	e.waitOutput(pyProc, "started "+hold)
	if _, err := e.Pool.Exec(e.Ctx, `SELECT ffd_cancel_flow($1)`, sub.FlowID); err != nil {
		t.Fatal(err)
	}
	e.waitOutput(pyProc, "cancelled "+hold)
}

// goTool is the go command of the toolchain running the test.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	p := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("no go command on PATH or in %s", p)
	}
	return p
}
