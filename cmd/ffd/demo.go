package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

// DemoCmd runs a realistic DAG end to end.
type DemoCmd struct {
	JSON    bool          `name:"json" help:"Print the final report as JSON (no live progress)."`
	Timeout time.Duration `name:"timeout" default:"${demo_timeout}" help:"Give up (and exit non-zero) after this long."`
}

// demoNode is one step of the demo DAG with the state its design implies.
type demoNode struct {
	ref, behaviour string
	want           ffd.State
	why            string // what is expected of the step, and why
	policy         *ffd.Policy
	after          []string
}

// demoDAG is a media pipeline: fan-out/fan-in, an any_of race with
// cancel_remaining, a 2-of-3 quorum with let_run, a step that fails once and
// succeeds on retry, and a branch skipped after a failure.
var demoDAG = []demoNode{
	{ref: "ingest", behaviour: "ok", why: "the root; runs first", want: ffd.StateCompleted},
	{ref: "resize-small", behaviour: "ok", why: "fan-out from ingest", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "resize-medium", behaviour: "ok", why: "fan-out from ingest", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "resize-large", behaviour: "ok", why: "fan-out from ingest", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "thumbnails", behaviour: "ok", why: "all_of join of the three resizes", want: ffd.StateCompleted, after: []string{"resize-small", "resize-medium", "resize-large"}},
	{ref: "mirror-eu", behaviour: "hang", why: "hangs; loses the any_of race and is cancelled", want: ffd.StateCancelled, after: []string{"ingest"}},
	{ref: "mirror-us", behaviour: "ok", why: "wins the any_of race", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "mirror-ap", behaviour: "hang", why: "hangs; loses the any_of race and is cancelled", want: ffd.StateCancelled, after: []string{"ingest"}},
	{ref: "cdn-publish", behaviour: "ok", why: "any_of(cancel_remaining): runs after the first mirror", want: ffd.StateCompleted, after: []string{"mirror-eu", "mirror-us", "mirror-ap"},
		policy: &ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}},
	{ref: "replica-1", behaviour: "ok", why: "one of three replicas", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "replica-2", behaviour: "ok", why: "one of three replicas", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "replica-3", behaviour: "slow", why: "slow; let_run lets it finish after the quorum", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "commit", behaviour: "ok", why: "quorum 2 of 3: runs before the slow replica ends", want: ffd.StateCompleted, after: []string{"replica-1", "replica-2", "replica-3"},
		policy: &ffd.Policy{Kind: ffd.Quorum, K: 2, OnSatisfied: ffd.LetRun}},
	{ref: "billing", behaviour: "flaky", why: "fails once (transient), succeeds on the retry", want: ffd.StateCompleted, after: []string{"ingest"}},
	{ref: "virus-scan", behaviour: "fail", why: "fails on purpose (permanent error): the flow fails", want: ffd.StateFailed, after: []string{"ingest"}},
	{ref: "quarantine-report", behaviour: "ok", why: "its upstream failed: skipped, never run", want: ffd.StateSkipped, after: []string{"virus-scan"}},
	{ref: "notify-legal", behaviour: "ok", why: "skip propagates down the branch", want: ffd.StateSkipped, after: []string{"quarantine-report"}},
	{ref: "finalize", behaviour: "ok", why: "all_of join of the four branches that succeed", want: ffd.StateCompleted, after: []string{"thumbnails", "cdn-publish", "commit", "billing"}},
}

type demoRow struct {
	Ref         string    `json:"ref"`
	Why         string    `json:"why"`
	AsExpected  bool      `json:"as_expected"`
	ExecutionID string    `json:"execution_id"`
	State       ffd.State `json:"state"`
	Expected    ffd.State `json:"expected"`
	Attempts    int       `json:"attempts"`
	DurationMS  int64     `json:"duration_ms"`
}

type demoReport struct {
	FlowID     string                    `json:"flow_id"`
	FlowState  ffd.FlowState             `json:"flow_state"`
	OK         bool                      `json:"ok"`
	DurationMS int64                     `json:"duration_ms"`
	Executions []demoRow                 `json:"executions"`
	Outbox     map[string]map[string]int `json:"outbox"`
}

// Run runs the demo; it fails unless every execution ends as designed.
func (c *DemoCmd) Run(ctx context.Context, g *Globals) error {
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	url := g.DatabaseURL
	if url == "" {
		dir, err := os.MkdirTemp("", "ffd-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil { // the server user must reach it
			return err
		}
		if !c.JSON {
			fmt.Fprintln(g.stdout, "starting a private PostgreSQL (pass --database-url to use another)")
		}
		srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "data"), StartTimeout: c.Timeout})
		if err != nil {
			return c.overBudget(ctx, "starting the private PostgreSQL", err)
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgserver.DefaultStopTimeout)
			defer cancel()
			_ = srv.Stop(stopCtx)
		}()
		url = srv.URL("postgres")
	}
	pcfg, err := g.poolConfig(url)
	if err != nil {
		return err
	}
	pcfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return c.overBudget(ctx, "connecting", err)
	}
	defer pool.Close()
	if _, err := schema.Up(ctx, pool, 0); err != nil {
		return c.overBudget(ctx, "migrating", err)
	}
	return c.overBudget(ctx, "the demo", c.demo(ctx, g, pool))
}

// overBudget names the demo's budget in err when ctx ran out of it: a
// loaded machine's raw "context deadline exceeded" says nothing of
// --timeout.
func (c *DemoCmd) overBudget(ctx context.Context, step string, err error) error {
	if err == nil || !errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return err
	}
	var named *demoTimeoutError
	if errors.As(err, &named) {
		return err
	}
	return &demoTimeoutError{step: step, budget: c.Timeout, err: err}
}

// demoTimeoutError is a step of the demo that ran out of --timeout.
type demoTimeoutError struct {
	step   string
	budget time.Duration
	err    error
}

func (e *demoTimeoutError) Error() string {
	return fmt.Sprintf("%s took longer than %s (--timeout; pass a longer one on a busy machine): %v", e.step, e.budget, e.err)
}

func (e *demoTimeoutError) Unwrap() error { return e.err }

func (c *DemoCmd) demo(ctx context.Context, g *Globals, pool *pgxpool.Pool) error {
	stopDaemon, err := startDemoDaemon(ctx, g, pool)
	if err != nil {
		return err
	}
	defer stopDaemon()
	log := g.log
	if g.autoLevel {
		// The report shows the designed failures; their warnings would
		// only interleave with the live progress.
		log = log.WithOptions(zap.IncreaseLevel(zap.ErrorLevel))
	}
	client, err := ffd.NewClient(pool, &ffd.Config{Logger: log})
	if err != nil {
		return err
	}
	lane := "demo-" + uuid.NewString()[:8]
	spec := demoSpec(lane)
	start := time.Now()
	sub, err := client.SubmitFlow(ctx, spec)
	if err != nil {
		return err
	}
	if !c.JSON {
		fmt.Fprintf(g.stdout, "submitted flow %s: %d steps, %d edges\n", sub.Flow.ID, len(spec.Nodes), len(spec.Edges))
	}
	worker, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{lane}, Concurrency: 8, ID: "demo-worker",
		PollInterval: 200 * time.Millisecond, Handler: demoHandler})
	if err != nil {
		return err
	}
	if err := worker.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = worker.Stop(stopCtx)
	}()
	if err := c.follow(ctx, g, pool, client, sub, start); err != nil {
		return err
	}
	return c.report(ctx, g, pool, client, sub, start)
}

// startDemoDaemon runs a daemon in-process and returns once it is ready,
// with the function that stops it.
func startDemoDaemon(ctx context.Context, g *Globals, pool *pgxpool.Pool) (stop func(), err error) {
	d, err := daemon.New(daemon.Config{Pool: pool, SweepInterval: 200 * time.Millisecond, Logger: g.log.Named("daemon"), Supervisor: daemon.NopSupervisor{}})
	if err != nil {
		return nil, err
	}
	if err := d.Start(ctx); err != nil {
		return nil, fmt.Errorf("start the daemon: %w", err)
	}
	return func() {
		if err := d.Stop(context.Background()); err != nil {
			g.log.Warn("daemon stopped with an error", zap.Error(err))
		}
	}, nil
}

// demoSpec is the demo's DAG, on one lane.
func demoSpec(lane string) ffd.SubmitFlowParams {
	spec := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{Kind: "media-pipeline"}}
	for _, n := range demoDAG {
		spec.Nodes = append(spec.Nodes, ffd.SubmitNode{Ref: n.ref, Policy: n.policy, Params: ffd.CreateParams{
			Lane: lane, Kind: n.behaviour, LeaseTTL: 3 * time.Second, MaxAttempts: 3,
			Retry: ffd.RetryPolicy{Base: 300 * time.Millisecond}, Tags: map[string]any{"step": n.ref},
		}})
		for _, a := range n.after {
			spec.Edges = append(spec.Edges, ffd.SubmitEdge{From: a, To: n.ref})
		}
	}
	return spec
}

// follow prints one line per state change, until the flow ends and the
// cascade is idle.
func (c *DemoCmd) follow(ctx context.Context, g *Globals, pool *pgxpool.Pool, client *ffd.Client, sub *ffd.SubmittedFlow, start time.Time) error {
	refs := map[ffd.ExecutionID]string{}
	for ref, x := range sub.Executions {
		refs[x.ID] = ref
	}
	seen := map[ffd.ExecutionID]ffd.State{}
	for {
		page, err := client.List(ctx, ffd.ListParams{FlowID: &sub.Flow.ID, Limit: 1000})
		if err != nil {
			return err
		}
		for _, x := range page.Executions {
			if seen[x.ID] != x.State {
				seen[x.ID] = x.State
				if !c.JSON {
					fmt.Fprintf(g.stdout, "%7.2fs  %-18s %s (attempt %d)\n", time.Since(start).Seconds(), refs[x.ID], x.State, x.Attempt)
				}
			}
		}
		fl, err := client.DescribeFlow(ctx, sub.Flow.ID)
		if err != nil {
			return err
		}
		left, err := store.ReadOutstanding(ctx, pool)
		if err != nil {
			return err
		}
		if fl.State != ffd.FlowOpen && left.Undispatched+left.CancelGroups == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return c.overBudget(ctx, "waiting for the flow to finish", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func demoHandler(ctx context.Context, job *ffd.Job) ([]byte, error) {
	pause := func(d time.Duration) error {
		select {
		case <-time.After(d):
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	switch job.Kind {
	case "hang": // a mirror that loses the race: runs until the engine cancels it
		if err := pause(time.Minute); err != nil {
			return nil, err
		}
	case "slow":
		if err := pause(400 * time.Millisecond); err != nil {
			return nil, err
		}
	case "flaky":
		if job.Attempt == 1 {
			return nil, errors.New("payment gateway timed out (transient)")
		}
	case "fail":
		return nil, ffd.Permanent(errors.New("malware signature found"))
	}
	if err := pause(50 * time.Millisecond); err != nil {
		return nil, err
	}
	return []byte(`{"ok":true}`), nil
}

func (c *DemoCmd) report(ctx context.Context, g *Globals, pool *pgxpool.Pool, client *ffd.Client, sub *ffd.SubmittedFlow, start time.Time) error {
	rep := demoReport{FlowID: sub.Flow.ID.String(), OK: true, DurationMS: time.Since(start).Milliseconds(),
		Outbox: map[string]map[string]int{"completion": {}, "lease": {}}}
	for _, n := range demoDAG {
		x, err := client.Get(ctx, sub.Executions[n.ref].ID)
		if err != nil {
			return err
		}
		row := demoRow{Ref: n.ref, Why: n.why, ExecutionID: x.ID.String(), State: x.State, Expected: n.want, Attempts: x.Attempt}
		if x.StartedAt != nil && x.TerminalAt != nil {
			row.DurationMS = x.TerminalAt.Sub(*x.StartedAt).Milliseconds()
		}
		row.AsExpected = x.State == n.want && (n.behaviour != "flaky" || x.Attempt == 2)
		if !row.AsExpected {
			rep.OK = false
		}
		rep.Executions = append(rep.Executions, row)
	}
	fl, err := client.DescribeFlow(ctx, sub.Flow.ID)
	if err != nil {
		return err
	}
	rep.FlowState = fl.State
	if fl.State != ffd.FlowFailed { // virus-scan failed by design
		rep.OK = false
	}
	completions, leases, err := store.FlowEventCounts(ctx, pool, sub.Flow.ID)
	if err != nil {
		return err
	}
	for k, n := range completions {
		rep.Outbox["completion"][string(k)] = n
	}
	for k, n := range leases {
		rep.Outbox["lease"][string(k)] = n
	}
	if c.JSON {
		if err := writeJSON(g.stdout, rep); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\nSTEP\tSTATE\tEXPECTED\tOK\tATTEMPTS\tDURATION\tWHY")
		for _, r := range rep.Executions {
			ok := "yes"
			if !r.AsExpected {
				ok = "NO"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%dms\t%s\n", r.Ref, r.State, r.Expected, ok, r.Attempts, r.DurationMS, r.Why)
		}
		tw.Flush()
		fmt.Fprintf(g.stdout, "\nflow %s %s in %dms", rep.FlowID, rep.FlowState, rep.DurationMS)
		if rep.FlowState == ffd.FlowFailed {
			fmt.Fprint(g.stdout, ", as designed: virus-scan fails on purpose, to show a failure and its skipped branch")
		}
		fmt.Fprintln(g.stdout)
		for _, stream := range []string{"completion", "lease"} {
			keys := make([]string, 0, len(rep.Outbox[stream]))
			for k := range rep.Outbox[stream] {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			fmt.Fprintf(g.stdout, "step %s events:", stream)
			for _, k := range keys {
				fmt.Fprintf(g.stdout, " %s=%d", k, rep.Outbox[stream][k])
			}
			fmt.Fprintln(g.stdout)
		}
	}
	if !rep.OK {
		return errors.New("demo: some executions did not end as the DAG implies")
	}
	if !c.JSON {
		fmt.Fprintln(g.stdout, "every step ended as the DAG implies")
	}
	g.log.Debug("demo finished", zap.String("flow_id", rep.FlowID))
	return nil
}
