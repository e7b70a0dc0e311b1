package ffd_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/flowfabric/ffd"
)

// chain3 is a three-step chain on lane.
func chain3(lane string) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{Kind: "chain"}}
	for _, ref := range []string{"a", "b", "c"} {
		p.Nodes = append(p.Nodes, ffd.SubmitNode{Ref: ref, Params: ffd.CreateParams{Lane: lane}})
	}
	p.Edges = []ffd.SubmitEdge{{From: "a", To: "b"}, {From: "b", To: "c"}}
	return p
}

func (f *fixture) flowState(id ffd.SubmittedFlow) ffd.FlowState {
	f.T.Helper()
	fl, err := f.client.DescribeFlow(f.Ctx, id.Flow.ID)
	if err != nil {
		f.T.Fatal(err)
	}
	return fl.State
}

// A daemon embedded in the application runs a flow to its end; it
// reports its metrics; Stop stops it.
func TestEmbeddedDaemonRunsAFlow(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := ffd.NewDaemon(f.Pool, &ffd.DaemonConfig{SweepInterval: 200 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer d.Stop(context.Background())
	if !d.Ready() {
		t.Fatal("Start returned before the daemon was ready")
	}
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"embedded"}, PollInterval: 50 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }})
	sub, err := f.client.SubmitFlow(f.Ctx, chain3("embedded"))
	if err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the flow to complete", func() bool { return f.flowState(*sub) == ffd.FlowCompleted })
	if got := counter(t, d.Registry(), "ffd_events_dispatched_total"); got < 2 {
		t.Fatalf("ffd_events_dispatched_total = %v, want at least the two upstream events", got)
	}
	if err := d.Stop(context.Background()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d.Ready() {
		t.Fatal("ready after Stop")
	}
}

// Run runs the embedded daemon in the foreground until its context ends,
// and returns nil after a graceful stop.
func TestEmbeddedDaemonRun(t *testing.T) {
	t.Parallel()
	f := setup(t)
	d, err := ffd.NewDaemon(f.Pool, &ffd.DaemonConfig{Logger: zap.NewNop(), StopTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(f.Ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	f.WaitFor("the daemon to be ready", d.Ready)
	cancel()
	runErr := f.await("Run to return", done)
	if runErr != nil || d.Ready() {
		t.Fatalf("Run returned %v (ready %v); want nil and not ready", runErr, d.Ready())
	}
}

// Without a daemon a flow stalls after its first step: the client and
// its workers say so (a warning and a gauge) once the wait passes the
// threshold, and say when dispatching resumes after a daemon starts.
func TestNoDaemonIsWarnedAbout(t *testing.T) {
	t.Parallel()
	f := setup(t)
	core, logs := observer.New(zap.InfoLevel)
	reg := prometheus.NewRegistry()
	client, err := ffd.NewClient(f.Pool, &ffd.Config{Logger: zap.New(core), StallWarning: time.Second, Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	f.startNoop(client, "stall")
	sub, err := client.SubmitFlow(f.Ctx, chain3("stall"))
	if err != nil {
		t.Fatal(err)
	}
	logged := func(msg string) func() bool {
		return func() bool { return logs.FilterMessageSnippet(msg).Len() > 0 }
	}
	f.WaitFor("the stall warning", logged("completion events are waiting for a daemon"))
	if lag, err := client.DispatchLag(f.Ctx); err != nil || lag < time.Second {
		t.Fatalf("DispatchLag = %v, %v; want at least the 1 s threshold", lag, err)
	}
	if got := gauge(t, reg, "ffd_dispatch_lag_seconds"); got < 1 {
		t.Fatalf("ffd_dispatch_lag_seconds = %v, want at least 1", got)
	}
	if st := f.flowState(*sub); st != ffd.FlowOpen {
		t.Fatalf("flow is %s without a daemon, want open (stalled)", st)
	}

	f.startDaemon()
	f.WaitFor("the flow to complete once a daemon runs", func() bool { return f.flowState(*sub) == ffd.FlowCompleted })
	f.WaitFor("the all-clear", logged("completion events are being dispatched again"))
	// The flow completes with its last step; that step's own event is
	// dispatched a moment later, so the lag reaches 0 by progress, not at
	// once (it was read at 17 ms once).
	var lag time.Duration
	f.WaitFor("DispatchLag to be 0 once the daemon has caught up", func() bool {
		lag, err = client.DispatchLag(f.Ctx)
		if err != nil {
			t.Fatalf("DispatchLag: %v", err)
		}
		return lag == 0
	})
}

// startDaemon embeds a quiet daemon until the test ends.
func (f *fixture) startDaemon() *ffd.Daemon {
	f.T.Helper()
	d, err := ffd.NewDaemon(f.Pool, &ffd.DaemonConfig{SweepInterval: 200 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		f.T.Fatal(err)
	}
	if err := d.Start(f.Ctx); err != nil {
		f.T.Fatalf("start the daemon: %v", err)
	}
	f.T.Cleanup(func() { _ = d.Stop(context.Background()) })
	return d
}

func metricValue(t *testing.T, g prometheus.Gatherer, name string, kind string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			if kind == "counter" {
				sum += m.GetCounter().GetValue()
			} else {
				sum += m.GetGauge().GetValue()
			}
		}
		return sum
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	t.Fatalf("no metric %s among %s", name, strings.Join(names, ", "))
	return 0
}

func counter(t *testing.T, g prometheus.Gatherer, name string) float64 {
	return metricValue(t, g, name, "counter")
}

func gauge(t *testing.T, g prometheus.Gatherer, name string) float64 {
	return metricValue(t, g, name, "gauge")
}
