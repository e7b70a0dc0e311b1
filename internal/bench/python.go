package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// pythonWorker: LangExecutions no-op executions worked by the Python
// client's Worker (clients/python) over the worker protocol, and as many
// by the Go Worker, each running LangWorkers handlers at once, in
// alternating rounds against one daemon; the medians of each side and
// their ratio. Each side's rate is read off its attempts' own timestamps,
// as the throughput scenario's is.
func pythonWorker(ctx context.Context, env *Env, p Params, r *Report) error {
	py, clientDir, err := findPython(p)
	if err != nil {
		return err
	}
	api, stopAPI, err := env.serveWorkerAPI()
	if err != nil {
		return err
	}
	defer stopAPI()
	d, err := env.startDaemon(ctx, p.SweepInterval)
	if err != nil {
		return err
	}
	defer d.stop()
	var pyRates, goRates []float64
	for round := range p.Rounds {
		for i := range 2 {
			python := (round+i)%2 == 0
			side := map[bool]string{true: "python", false: "go"}[python]
			lane := env.lane(fmt.Sprintf("lang-%s-%d", side, round))
			if err := env.createMany(ctx, ffdtype.CreateParams{Lane: lane}, p.LangExecutions); err != nil {
				return err
			}
			var stop func()
			if python {
				stop, err = startPythonWorker(ctx, py, clientDir, api, lane, p.LangWorkers)
			} else {
				stop, err = env.startWorker(ctx, []string{lane}, p.LangWorkers, func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
			}
			if err != nil {
				return err
			}
			rate, err := env.drained(ctx, lane, p.LangExecutions)
			stop()
			if err != nil {
				return fmt.Errorf("%s worker: %w", side, err)
			}
			if python {
				pyRates = append(pyRates, rate)
			} else {
				goRates = append(goRates, rate)
			}
		}
	}
	pyRate, goRate := median(pyRates), median(goRates)
	r.Figures["python_executions_per_second"] = pyRate
	r.Figures["go_executions_per_second"] = goRate
	r.Figures["python_to_go"] = pyRate / goRate
	r.Figures["python_rounds"], r.Figures["go_rounds"] = pyRates, goRates
	r.Figures["handlers"] = p.LangWorkers
	r.Targets = append(r.Targets, target("python_executions_per_second", ">= 500 with 16 handlers", pyRate, "1/s", pyRate >= 500))
	return env.checkInvariants(ctx)
}

// drained waits until lane has no live execution and answers the rate
// of its n executions, each of which must have completed on its first
// attempt.
func (e *Env) drained(ctx context.Context, lane string, n int) (float64, error) {
	err := pollUntil(ctx, "every execution of "+lane+" to complete", 10*time.Minute, 100*time.Millisecond, func() (bool, error) {
		left, err := e.left(ctx, lane)
		return left == 0, err
	})
	if err != nil {
		return 0, err
	}
	return e.firstTimeRate(ctx, lane, n)
}

// firstTimeRate is the rate of lane's n executions over their attempts'
// own span, each of which must have completed on its first attempt.
func (e *Env) firstTimeRate(ctx context.Context, lane string, n int) (float64, error) {
	if c, err := store.CompletedFirstTime(ctx, e.Pool, lane); err != nil || c != n {
		return 0, fmt.Errorf("%d of %d executions completed on their first attempt (%v)", c, n, err)
	}
	span, err := store.AttemptSpan(ctx, e.Pool, lane)
	if err != nil {
		return 0, err
	}
	return float64(n) / span.Seconds(), nil
}

// benchToken is the token of the bench's own worker API, on loopback.
const benchToken = "ffd-bench-worker-token"

// serveWorkerAPI serves the worker protocol on a loopback port of its own.
func (e *Env) serveWorkerAPI() (url string, stop func(), err error) {
	c, err := e.client()
	if err != nil {
		return "", nil, err
	}
	api, err := ffd.NewWorkerAPI(c, ffd.WorkerAPIConfig{Tokens: []string{benchToken}})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	return "http://" + ln.Addr().String(), func() {
		srv.Close()
		_ = api.Close()
	}, nil
}

// pythonWorkerScript runs the Python client's Worker with a no-op
// handler until SIGTERM.
const pythonWorkerScript = `
import os, signal, sys, threading
sys.path.insert(0, os.environ["FFD_PYTHON_CLIENT"])
import ffd
w = ffd.Worker(os.environ["FFD_API_URL"], os.environ["FFD_WORKER_TOKEN"], os.environ["FFD_LANE"],
               {"*": lambda job: None}, concurrency=int(os.environ["FFD_HANDLERS"]), claim_wait=1.0)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
w.start()
stop.wait()
w.stop()
`

func startPythonWorker(ctx context.Context, py, clientDir, api, lane string, handlers int) (func(), error) {
	cmd := exec.CommandContext(ctx, py, "-c", pythonWorkerScript)
	cmd.Env = append(os.Environ(), "FFD_PYTHON_CLIENT="+clientDir, "FFD_API_URL="+api, "FFD_WORKER_TOKEN="+benchToken,
		"FFD_LANE="+lane, fmt.Sprintf("FFD_HANDLERS=%d", handlers))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the Python worker (%s): %w", py, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait() //nolint:errcheck // its end is all that is awaited
		close(done)
	}()
	return func() {
		cmd.Process.Signal(syscall.SIGTERM) //nolint:errcheck // it may have exited
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill() //nolint:errcheck // it may have exited
			<-done
		}
	}, nil
}

// findPython is the interpreter (Params.Python, else FFD_PYTHON, else
// python3) and the Python client's directory (Params.PythonClient, else
// clients/python in the working directory or one above it).
func findPython(p Params) (py, dir string, err error) {
	py = p.Python
	if py == "" {
		py = os.Getenv("FFD_PYTHON")
	}
	if py == "" {
		py = "python3"
	}
	if py, err = exec.LookPath(py); err != nil {
		return "", "", fmt.Errorf("the python-worker scenario needs a Python 3 (--python): %w", err)
	}
	dir = p.PythonClient
	if dir == "" {
		wd, _ := os.Getwd()
		for d := wd; ; d = filepath.Dir(d) {
			if _, err := os.Stat(filepath.Join(d, "clients", "python", "ffd", "__init__.py")); err == nil {
				dir = filepath.Join(d, "clients", "python")
				break
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if dir == "" {
		return "", "", errors.New("the python-worker scenario needs ffd's Python client: run it in a checkout, or name clients/python with --python-client")
	}
	if out, err := exec.Command(py, "-c", "import sys; sys.path.insert(0, sys.argv[1]); import ffd", dir).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("%s cannot import the Python client in %s: %v: %s", py, dir, err, strings.TrimSpace(string(out)))
	}
	return py, dir, nil
}
