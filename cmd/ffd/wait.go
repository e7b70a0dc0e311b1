package main

import (
	"context"
	"errors"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/flowfabric/ffd"
)

// The exit codes of `ffd exec wait` and `ffd flow wait`, past the ones
// every command shares (docs/operations.md, "Exit codes"): 0 when it
// completed, these for the other ends.
const (
	exitOutcomeFailed    = 3 // failed, or expired
	exitOutcomeCancelled = 4 // cancelled, or skipped
	exitWaitTimedOut     = 5 // --timeout passed first
)

// outcomeError ends a wait command whose object ended otherwise than
// completed: its exit code says how; its message is printed after the
// object.
type outcomeError struct {
	code int
	msg  string
}

func (e *outcomeError) Error() string { return e.msg }

// waitContext bounds a wait by --timeout (0: none).
func waitContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, timeout)
}

// waitFailed turns a wait's error into the command's: --timeout passing
// is its own exit code.
func waitFailed(err error, what string, timeout time.Duration) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &outcomeError{code: exitWaitTimedOut, msg: fmt.Sprintf("%s did not end within --timeout %s", what, timeout)}
	}
	return err
}

// ExecWaitCmd waits for an execution to end.
type ExecWaitCmd struct {
	output
	ID      string        `arg:"" help:"Execution id: {fp:N}:<uuid>, or the bare uuid."`
	Timeout time.Duration `name:"timeout" default:"0" help:"Give up after this long, with exit code 5 (0: wait until it ends or ffd is interrupted)."`
}

// Run waits, prints the execution with its result, and exits 0 when it
// completed, 3 when it failed or expired, 4 when it was cancelled or
// skipped.
func (c *ExecWaitCmd) Run(ctx context.Context, g *Globals) error {
	client, x, err := g.execution(ctx, c.ID)
	if err != nil {
		return err
	}
	wctx, cancel := waitContext(ctx, c.Timeout)
	defer cancel()
	if x, err = client.WaitExecution(wctx, x.ID); err != nil {
		return waitFailed(err, "execution "+c.ID, c.Timeout)
	}
	out := execJSON(x)
	out["result"] = body(x.Result)
	if err := c.print(g.stdout, out, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "execution\t%s\nstate\t%s\nattempt\t%d\n", x.ID, x.State, x.Attempt)
		if x.State == ffd.StateCompleted {
			fmt.Fprintf(tw, "result\t%s\n", preview(x.Result))
		} else {
			fmt.Fprintf(tw, "error\t%s\n", dash(oneLine(x.LastError+x.CancellationReason, previewBytes)))
		}
	}); err != nil {
		return err
	}
	return outcomeOf(string(x.State), "execution "+x.ID.String())
}

// FlowWaitCmd waits for a flow to end.
type FlowWaitCmd struct {
	output
	ID      string        `arg:"" help:"Flow id (uuid)."`
	Timeout time.Duration `name:"timeout" default:"0" help:"Give up after this long, with exit code 5 (0: wait until it ends or ffd is interrupted)."`
}

// Run waits, prints the flow's state and every step's outcome and result,
// and exits 0 when it completed, 3 when it failed, 4 when it was
// cancelled.
func (c *FlowWaitCmd) Run(ctx context.Context, g *Globals) error {
	client, id, err := g.flow(ctx, c.ID)
	if err != nil {
		return err
	}
	wctx, cancel := waitContext(ctx, c.Timeout)
	defer cancel()
	out, err := client.WaitFlow(wctx, id)
	if err != nil {
		return waitFailed(err, "flow "+c.ID, c.Timeout)
	}
	members := make([]map[string]any, len(out.Members))
	for i, x := range out.Members {
		members[i] = map[string]any{"execution_id": x.ID.String(), "step": x.Step, "state": x.State,
			"attempt": x.Attempt, "result": body(x.Result), "last_error": x.LastError}
	}
	js := map[string]any{"flow_id": out.Flow.ID.String(), "state": out.Flow.State, "terminal_at": out.Flow.TerminalAt,
		"cancel_reason": out.Flow.CancelReason, "members": members}
	if err := c.print(g.stdout, js, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "flow %s %s\n\nSTEP\tEXECUTION\tSTATE\tRESULT / ERROR\n", out.Flow.ID, out.Flow.State)
		for _, x := range out.Members {
			what := preview(x.Result)
			if x.State != ffd.StateCompleted {
				what = dash(oneLine(x.LastError+x.CancellationReason, previewBytes))
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", dash(x.Step), x.ID, x.State, what)
		}
	}); err != nil {
		return err
	}
	return outcomeOf(string(out.Flow.State), "flow "+out.Flow.ID.String())
}

// outcomeOf is nil for a completed object, else the outcomeError whose
// exit code names how it ended.
func outcomeOf(state, what string) error {
	switch state {
	case string(ffd.StateCompleted):
		return nil
	case string(ffd.StateFailed), string(ffd.StateExpired):
		return &outcomeError{code: exitOutcomeFailed, msg: what + " " + state}
	default:
		return &outcomeError{code: exitOutcomeCancelled, msg: what + " " + state}
	}
}

// signalFlags are the flags of the signal commands.
type signalFlags struct {
	output
	Name    string `arg:"" help:"Signal name: [A-Za-z0-9_.:-]{1,128}; a wait for it (WaitForSignal) takes it."`
	Payload string `name:"payload" help:"The signal's payload, as given (text or JSON); empty by default."`
}

// send sends the signal and prints what took it.
func (s *signalFlags) send(ctx context.Context, g *Globals, client *ffd.Client, p ffd.SignalParams) error {
	p.Name, p.Payload = s.Name, []byte(s.Payload)
	res, err := client.Signal(ctx, p)
	if err != nil {
		return err
	}
	js := map[string]any{"signal_id": res.Signal.ID.String(), "name": res.Signal.Name, "sent_at": res.Signal.SentAt, "woke": nil}
	if res.Woke != nil {
		js["woke"] = res.Woke.String()
	}
	return s.print(g.stdout, js, func(tw *tabwriter.Writer) {
		if res.Woke != nil {
			fmt.Fprintf(tw, "signal %s %s woke %s\n", res.Signal.Name, res.Signal.ID, res.Woke)
		} else {
			fmt.Fprintf(tw, "signal %s %s kept: no step waits for it yet; the first wait for it takes it\n", res.Signal.Name, res.Signal.ID)
		}
	})
}

// FlowSignalCmd sends a signal to a flow.
type FlowSignalCmd struct {
	ID string `arg:"" help:"Flow id (uuid)."`
	signalFlags
}

// Run sends the signal: the first member that waits for its name takes
// it, now or when it waits. A finished flow refuses it.
func (c *FlowSignalCmd) Run(ctx context.Context, g *Globals) error {
	client, id, err := g.flow(ctx, c.ID)
	if err != nil {
		return err
	}
	return c.send(ctx, g, client, ffd.SignalParams{FlowID: &id})
}

// ExecSignalCmd sends a signal to an execution.
type ExecSignalCmd struct {
	ID string `arg:"" help:"Execution id: {fp:N}:<uuid>, or the bare uuid."`
	signalFlags
}

// Run sends the signal to the execution. A finished one refuses it.
func (c *ExecSignalCmd) Run(ctx context.Context, g *Globals) error {
	client, x, err := g.execution(ctx, c.ID)
	if err != nil {
		return err
	}
	return c.send(ctx, g, client, ffd.SignalParams{Execution: &x.ID})
}
