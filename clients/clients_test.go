// Package clients_test runs the clients in other languages (clients/python,
// clients/typescript) and the mixed example (examples/mixed) against a
// real Postgres and a real ffd daemon serving the worker protocol.
package clients_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	t.Cleanup(srv.Close)
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
