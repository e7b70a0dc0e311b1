package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
)

// previewBytes bounds how much of a payload or result `exec show` prints
// in its table; --json prints all of it.
const previewBytes = 120

// execution connects and reads the execution s names: a full
// "{fp:N}:<uuid>" id, or a bare uuid (what people copy from logs), which
// is looked up on every partition.
func (g *Globals) execution(ctx context.Context, s string) (*ffd.Client, *ffd.Execution, error) {
	id, bare, err := parseExecutionRef(s)
	if err != nil {
		return nil, nil, err
	}
	client, err := g.client(ctx)
	if err != nil {
		return nil, nil, err
	}
	var x *ffd.Execution
	if bare == nil {
		x, err = client.Get(ctx, id)
	} else {
		x, err = client.GetByUUID(ctx, *bare)
	}
	return client, x, err
}

// parseExecutionRef reads s, a full execution id or a bare uuid (bare
// set). Neither form is the full form's error, saying what it wants.
func parseExecutionRef(s string) (id ffd.ExecutionID, bare *uuid.UUID, err error) {
	id, perr := ffd.ParseExecutionID(s)
	if perr == nil {
		return id, nil, nil
	}
	u, uerr := uuid.Parse(s)
	if uerr != nil || strings.HasPrefix(s, "{") {
		return id, nil, perr
	}
	return id, &u, nil
}

// executionID is the id s names, a bare uuid looked up on every
// partition.
func executionID(ctx context.Context, client *ffd.Client, s string) (ffd.ExecutionID, error) {
	id, bare, err := parseExecutionRef(s)
	if err != nil || bare == nil {
		return id, err
	}
	x, err := client.GetByUUID(ctx, *bare)
	if err != nil {
		return ffd.ExecutionID{}, err
	}
	return x.ID, nil
}

// flow connects and parses the flow id s.
func (g *Globals) flow(ctx context.Context, s string) (*ffd.Client, uuid.UUID, error) {
	id, err := ffdtype.ParseUUID("flow id", s)
	if err != nil {
		return nil, uuid.Nil, err
	}
	client, err := g.client(ctx)
	return client, id, err
}

// ExecShowCmd shows one execution.
type ExecShowCmd struct {
	output
	ID string `arg:"" help:"Execution id: {fp:N}:<uuid>, or the bare uuid."`
}

// Run prints the execution, a preview of its payload and result, and its
// attempts.
func (c *ExecShowCmd) Run(ctx context.Context, g *Globals) error {
	client, x, err := g.execution(ctx, c.ID)
	if err != nil {
		return err
	}
	attempts, err := client.Attempts(ctx, x.ID)
	if err != nil {
		return err
	}
	wake, err := client.Wake(ctx, x.ID)
	if err != nil {
		return err
	}
	out := execJSON(x)
	out["wait"] = wakeJSON(wake)
	out["payload"], out["result"] = body(x.Payload), body(x.Result)
	as := make([]map[string]any, len(attempts))
	for i, a := range attempts {
		as[i] = map[string]any{"attempt": a.Attempt, "lease_epoch": a.LeaseEpoch, "worker": a.Worker,
			"started_at": a.StartedAt, "ended_at": a.EndedAt, "outcome": a.Outcome, "error": a.Error}
	}
	out["attempts"] = as
	return c.print(g.stdout, out, func(tw *tabwriter.Writer) {
		flow := "-"
		if x.FlowID != nil {
			flow = x.FlowID.String()
		}
		rows := [][2]string{
			{"execution_id", x.ID.String()}, {"flow_id", flow}, {"step", dash(x.Step)}, {"namespace", x.Namespace}, {"version", dash(x.Version)},
			{"lane", x.Lane}, {"kind", dash(x.Kind)}, {"state", string(x.State)}, {"priority", fmt.Sprint(x.Priority)},
			{"attempt", fmt.Sprintf("%d of %d", x.Attempt, x.MaxAttempts)}, {"lease_epoch", fmt.Sprint(x.LeaseEpoch)},
			{"lease_owner", dash(x.LeaseOwner)}, {"lease_expires_at", ts(x.LeaseExpiresAt)}, {"run_at", ts(&x.RunAt)},
			{"created_at", ts(&x.CreatedAt)}, {"started_at", ts(x.StartedAt)}, {"terminal_at", ts(x.TerminalAt)},
			{"last_error", dash(x.LastError)}, {"cancellation_reason", dash(x.CancellationReason)}, {"cancelled_by", dash(x.CancelledBy)},
			{"payload", preview(x.Payload)}, {"result", preview(x.Result)}, {"wait", describeWake(wake)},
		}
		for _, r := range rows {
			fmt.Fprintf(tw, "%s\t%s\n", r[0], r[1])
		}
		fmt.Fprintln(tw, "\nATTEMPT\tWORKER\tEPOCH\tSTARTED\tENDED\tOUTCOME\tERROR")
		for _, a := range attempts {
			fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\t%s\t%s\n", a.Attempt, a.Worker, a.LeaseEpoch, ts(&a.StartedAt), ts(a.EndedAt),
				dash(string(a.Outcome)), dash(oneLine(a.Error, previewBytes)))
		}
		if len(attempts) == 0 {
			fmt.Fprintln(tw, "(none yet)")
		}
	})
}

// describeWake says what an execution waits for, or what ended its last
// wait; "-" when it never waited.
func describeWake(w *ffd.Wake) string {
	if w == nil {
		return "-"
	}
	what := "sleeps"
	if w.For == "signal" {
		what = "waits for signal " + w.Signal
	}
	if w.Waiting {
		if w.Until == nil {
			return what + " (no timeout)"
		}
		return what + " until " + ts(w.Until)
	}
	if w.Received != nil {
		return fmt.Sprintf("woken by signal %s %s (payload %s) after attempt %d", w.Received.Name, w.Received.ID, preview(w.Received.Payload), w.Attempt)
	}
	return fmt.Sprintf("%s: ended by its %s after attempt %d", strings.TrimSuffix(what, "s"), w.Reason, w.Attempt)
}

// wakeJSON is the stable JSON form of a Wake (nil: null).
func wakeJSON(w *ffd.Wake) map[string]any {
	if w == nil {
		return nil
	}
	m := map[string]any{"for": w.For, "signal": w.Signal, "until": w.Until, "attempt": w.Attempt, "waits": w.Waits,
		"waiting": w.Waiting, "reason": w.Reason, "received": nil}
	if r := w.Received; r != nil {
		m["received"] = map[string]any{"signal_id": r.ID.String(), "name": r.Name, "sent_at": r.SentAt, "payload": body(r.Payload)}
	}
	return m
}

// body is a payload or result as JSON output shows it: itself when it is
// JSON, a string when it is text, base64 (encoding/json's []byte) when
// it is neither.
func body(b []byte) any {
	switch {
	case len(b) == 0:
		return nil
	case json.Valid(b):
		return json.RawMessage(b)
	case utf8.Valid(b):
		return string(b)
	}
	return b
}

// preview is the start of a payload or result on one line, with its size.
func preview(b []byte) string {
	switch {
	case len(b) == 0:
		return "-"
	case !utf8.Valid(b):
		return fmt.Sprintf("(%d bytes, binary)", len(b))
	}
	s := oneLine(string(b), previewBytes)
	if len(b) > previewBytes {
		s += fmt.Sprintf(" (%d bytes)", len(b))
	}
	return s
}

// oneLine folds s onto one line and cuts it to at most n bytes (on a rune
// boundary), marking the cut.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// dash stands in for an empty value in a table.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// FlowShowCmd shows one flow.
type FlowShowCmd struct {
	output
	ID string `arg:"" help:"Flow id."`
}

// Run prints the flow: its steps with their states and joins, and its
// edges, by step name; a warning when it waits for a daemon.
func (c *FlowShowCmd) Run(ctx context.Context, g *Globals) error {
	client, id, err := g.flow(ctx, c.ID)
	if err != nil {
		return err
	}
	f, err := client.DescribeFlow(ctx, id)
	if err != nil {
		return err
	}
	members, err := flowMembers(ctx, client, id)
	if err != nil {
		return err
	}
	edges, err := client.FlowEdges(ctx, id)
	if err != nil {
		return err
	}
	lag, err := client.DispatchLag(ctx)
	if err != nil {
		return err
	}
	whys := stepReasons(ctx, client, members, edges, time.Now())
	out := flowJSON(f)
	ms := make([]map[string]any, len(members))
	for i, x := range members {
		ms[i] = execJSON(x)
		ms[i]["why"] = whys[x.ID]
	}
	es := make([]map[string]any, len(edges))
	for i, e := range edges {
		es[i] = map[string]any{"edge_id": e.ID.String(), "upstream_id": e.Upstream.String(), "downstream_id": e.Downstream.String(),
			"state": e.State, "resolved_outcome": e.ResolvedOutcome}
	}
	out["members"], out["edges"], out["dispatch_lag_seconds"] = ms, es, lag.Seconds()
	if !c.JSON && f.State == ffd.FlowOpen && lag >= ffd.DefaultStallWarning {
		// The table goes first; this reads as its last line.
		defer fmt.Fprintf(g.stdout, "\nwarning: completion events have waited %s for a daemon: this flow will not advance until one runs (ffd run, or ffd.NewDaemon in the application)\n", lag.Round(time.Second))
	}
	return c.print(g.stdout, out, func(tw *tabwriter.Writer) { printFlow(tw, f, members, edges, whys) })
}

// maxWakeReads bounds the waits flow show reads (one query each) to say
// what a pending step that is not yet due waits for.
const maxWakeReads = 100

// stepReasons says, for each member of a flow, why it is where it is:
// what a failed step's error was, what a blocked one waits for, why one
// was skipped or cancelled, what a pending one waits for.
func stepReasons(ctx context.Context, client *ffd.Client, members []*ffd.Execution, edges []*ffd.Edge, now time.Time) map[ffd.ExecutionID]string {
	name := map[ffd.ExecutionID]string{}
	for _, x := range members {
		name[x.ID] = x.Step
		if x.Step == "" {
			name[x.ID] = x.ID.String()
		}
	}
	waitingOn, endedBadly := map[ffd.ExecutionID][]string{}, map[ffd.ExecutionID][]string{}
	for _, e := range edges {
		switch {
		case e.ResolvedOutcome == "":
			waitingOn[e.Downstream] = append(waitingOn[e.Downstream], name[e.Upstream])
		case e.ResolvedOutcome != "success":
			endedBadly[e.Downstream] = append(endedBadly[e.Downstream], name[e.Upstream]+" "+string(e.ResolvedOutcome))
		}
	}
	out := map[ffd.ExecutionID]string{}
	reads := 0
	for _, x := range members {
		switch x.State {
		case ffd.StateFailed, ffd.StateExpired:
			out[x.ID] = "error: " + dash(oneLine(x.LastError, previewBytes))
		case ffd.StateCancelled:
			out[x.ID] = "cancelled: " + x.CancellationReason + " (by " + dash(x.CancelledBy) + ")"
		case ffd.StateSkipped:
			out[x.ID] = "its join cannot be met: upstream " + strings.Join(endedBadly[x.ID], ", ")
		case ffd.StateBlocked:
			out[x.ID] = "waits for upstream " + strings.Join(waitingOn[x.ID], ", ")
		case ffd.StateRunning:
			out[x.ID] = "runs on " + dash(x.LeaseOwner) + ", lease until " + ts(x.LeaseExpiresAt)
			if x.Lane == ffd.SubflowLane && reads < maxWakeReads {
				reads++
				if child, err := client.ChildFlow(ctx, x.ID); err == nil && child != nil {
					out[x.ID] = "runs sub-flow " + child.ID.String() + " (ffd flow show " + child.ID.String() + ")"
				}
			}
		case ffd.StatePending:
			out[x.ID] = pendingReason(ctx, client, x, now, &reads)
		}
	}
	return out
}

// pendingReason says what a pending step waits for: a worker of its lane
// when due; else its wait (a sleep, a signal), or its retry's backoff.
func pendingReason(ctx context.Context, client *ffd.Client, x *ffd.Execution, now time.Time, reads *int) string {
	if !x.RunAt.After(now) {
		return "due: waits for a worker of lane " + x.Lane
	}
	if *reads < maxWakeReads {
		*reads++
		if w, err := client.Wake(ctx, x.ID); err == nil && w != nil && w.Waiting {
			return describeWake(w)
		}
	}
	if x.LastError != "" {
		return "retries at " + ts(&x.RunAt) + " after: " + oneLine(x.LastError, previewBytes)
	}
	return "due at " + ts(&x.RunAt)
}

// flowMembers reads every member of a flow, page by page.
func flowMembers(ctx context.Context, client *ffd.Client, id uuid.UUID) ([]*ffd.Execution, error) {
	var members []*ffd.Execution
	p := ffd.ListParams{FlowID: &id, Limit: 1000}
	for {
		page, err := client.List(ctx, p)
		if err != nil {
			return nil, err
		}
		members = append(members, page.Executions...)
		if page.Next == nil {
			return members, nil
		}
		p.After = page.Next
	}
}

// printLinks prints what a flow is linked to: its version, the step it
// is the sub-flow of, its compensations.
func printLinks(tw *tabwriter.Writer, f *ffd.Flow) {
	if f.Version != "" {
		fmt.Fprintf(tw, "version %s\n", f.Version)
	}
	if f.Parent != nil {
		fmt.Fprintf(tw, "sub-flow of step %s (ffd exec show %s)\n", f.Parent, f.Parent)
	}
	if f.CompensationOf != nil {
		fmt.Fprintf(tw, "compensates flow %s\n", f.CompensationOf)
	}
	switch {
	case f.CompensationFlow != nil:
		fmt.Fprintf(tw, "compensation started: flow %s\n", f.CompensationFlow)
	case f.Compensation != "":
		fmt.Fprintf(tw, "compensation %s\n", f.Compensation)
	}
}

// printFlow is flow show's table: the steps, then the edges between them.
func printFlow(tw *tabwriter.Writer, f *ffd.Flow, members []*ffd.Execution, edges []*ffd.Edge, whys map[ffd.ExecutionID]string) {
	fmt.Fprintf(tw, "flow %s (%s) %s, %d steps, %d edges, revision %d\n", f.ID, dash(f.Kind), f.State, f.NodeCount, f.EdgeCount, f.GraphRevision)
	printLinks(tw, f)
	fmt.Fprintln(tw)
	name := map[ffd.ExecutionID]string{}
	for _, x := range members {
		name[x.ID] = x.Step
		if x.Step == "" {
			name[x.ID] = x.ID.String()
		}
	}
	join := map[ffd.ExecutionID]ffd.EdgeGroup{}
	for _, gr := range f.Groups {
		join[gr.Downstream] = gr
	}
	fmt.Fprintln(tw, "STEP\tKIND\tSTATE\tATTEMPT\tJOIN\tDECISION\tEXECUTION\tWHY")
	for _, x := range members {
		j, dec := "-", "-"
		if gr, ok := join[x.ID]; ok {
			j = fmt.Sprintf("%s %d/%d ok, %d bad", policyString(gr.Policy), gr.Counts.Success, gr.Counts.Total, gr.Counts.Fail+gr.Counts.Skip)
			dec = string(gr.Decision)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", dash(x.Step), dash(x.Kind), x.State, x.Attempt, j, dec, x.ID, dash(whys[x.ID]))
	}
	fmt.Fprintln(tw, "\nFROM\tTO\tEDGE\tUPSTREAM OUTCOME")
	for _, e := range edges {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name[e.Upstream], name[e.Downstream], e.State, dash(string(e.ResolvedOutcome)))
	}
	if len(edges) == 0 {
		fmt.Fprintln(tw, "(no edges)")
	}
}

// sortedSteps are a flow's executions by step name.
func sortedSteps(m map[string]*ffd.Execution) []*ffd.Execution {
	xs := make([]*ffd.Execution, 0, len(m))
	for _, x := range m {
		xs = append(xs, x)
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Step < xs[j].Step })
	return xs
}
