package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
)

// ExecCmd groups the execution ops commands.
type ExecCmd struct {
	Show   ExecShowCmd   `cmd:"" help:"Show one execution and its attempts."`
	List   ExecListCmd   `cmd:"" help:"List executions."`
	Cancel ExecCancelCmd `cmd:"" help:"Cancel an execution (a running one is fenced)."`
	Rerun  ExecRerunCmd  `cmd:"" help:"Run a failed, expired or cancelled solo execution again, as a new execution."`
	Wait   ExecWaitCmd   `cmd:"" help:"Wait for an execution to end; print it with its result; exit 0 completed, 3 failed/expired, 4 cancelled/skipped, 5 --timeout."`
	Signal ExecSignalCmd `cmd:"" help:"Send a named signal with a payload to an execution; its wait for the name takes it."`
}

// FlowCmd groups the flow ops commands.
type FlowCmd struct {
	Show   FlowShowCmd   `cmd:"" help:"Show one flow with its steps, edges and joins."`
	List   FlowListCmd   `cmd:"" help:"List flows."`
	Cancel FlowCancelCmd `cmd:"" help:"Cancel a flow."`
	Rerun  FlowRerunCmd  `cmd:"" help:"Run a failed or cancelled flow again as a new flow: steps that succeeded keep their results."`
	Wait   FlowWaitCmd   `cmd:"" help:"Wait for a flow to end; print every step's outcome and result; exit 0 completed, 3 failed, 4 cancelled, 5 --timeout."`
	Signal FlowSignalCmd `cmd:"" help:"Send a named signal with a payload to a flow; the first step that waits for the name takes it."`
	Submit FlowSubmitCmd `cmd:"" help:"Submit a flow from a flow file (sub-flows, compensations and versions included)."`
}

type output struct {
	JSON bool `name:"json" help:"Print JSON instead of a table."`
}

func (o output) print(w io.Writer, v any, table func(tw *tabwriter.Writer)) error {
	if o.JSON {
		return writeJSON(w, v)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	table(tw)
	return tw.Flush()
}

// writeJSON writes v as indented JSON, the form every --json output takes.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// client connects to the database for the command's run; the pool closes
// when the command ends.
func (g *Globals) client(ctx context.Context) (*ffd.Client, error) {
	pool, err := g.checkedPool(ctx)
	if err != nil {
		return nil, err
	}
	g.closes = append(g.closes, pool.Close)
	return ffd.NewClient(pool, nil)
}

// clientIn is client in namespace ("" for the default).
func (g *Globals) clientIn(ctx context.Context, namespace string) (*ffd.Client, error) {
	pool, err := g.checkedPool(ctx)
	if err != nil {
		return nil, err
	}
	g.closes = append(g.closes, pool.Close)
	return ffd.NewClient(pool, &ffd.Config{Namespace: namespace})
}

// execJSON is the stable JSON form of an execution (snake_case, as in the
// schema).
func execJSON(x *ffd.Execution) map[string]any {
	m := map[string]any{
		"execution_id": x.ID.String(), "namespace": x.Namespace, "lane": x.Lane, "kind": x.Kind,
		"priority": x.Priority, "required_capabilities": x.RequiredCapabilities, "state": x.State,
		"run_at": x.RunAt, "attempt": x.Attempt, "max_attempts": x.MaxAttempts, "lease_epoch": x.LeaseEpoch,
		"lease_owner": x.LeaseOwner, "lease_expires_at": x.LeaseExpiresAt, "lease_ttl": x.LeaseTTL.String(),
		"deadline_at": x.DeadlineAt, "last_error": x.LastError, "created_at": x.CreatedAt,
		"started_at": x.StartedAt, "terminal_at": x.TerminalAt, "cancellation_reason": x.CancellationReason,
		"cancelled_by": x.CancelledBy, "tags": x.Tags, "payload_bytes": len(x.Payload), "result_bytes": len(x.Result),
		"version": x.Version,
	}
	if x.FlowID != nil {
		m["flow_id"], m["step"] = x.FlowID.String(), x.Step
	}
	if x.RerunOf != nil {
		m["rerun_of"] = x.RerunOf.String()
	}
	return m
}

func ts(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// ExecListCmd lists executions.
type ExecListCmd struct {
	output
	Lane  string `name:"lane" help:"Only this lane."`
	State string `name:"state" help:"Only this state."`
	Kind  string `name:"kind" help:"Only this kind."`
	Flow  string `name:"flow" help:"Only members of this flow."`
	After string `name:"after" help:"Cursor: the last execution id of the previous page."`
	Limit int    `name:"limit" default:"50" help:"Page size (1..1000)."`
}

// Run prints one page.
func (c *ExecListCmd) Run(ctx context.Context, g *Globals) error {
	p := ffd.ListParams{Lane: c.Lane, State: ffd.State(c.State), Kind: c.Kind, Limit: c.Limit}
	if c.Flow != "" {
		id, err := ffdtype.ParseUUID("flow id", c.Flow)
		if err != nil {
			return err
		}
		p.FlowID = &id
	}
	var err error
	if p.After, err = afterFlag(c.After); err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	page, err := client.List(ctx, p)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "executions", page.Executions, cursor(page.Next), execJSON,
		"EXECUTION\tFLOW\tSTEP\tKIND\tLANE\tSTATE\tATTEMPT\tCREATED", func(tw *tabwriter.Writer, x *ffd.Execution) {
			flow := "-"
			if x.FlowID != nil {
				flow = x.FlowID.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\n", x.ID, flow, dash(x.Step), dash(x.Kind), x.Lane, x.State,
				x.Attempt, x.MaxAttempts, ts(&x.CreatedAt))
		})
}

// afterFlag is an --after flag's execution id; nil when it is not set.
func afterFlag(s string) (*ffd.ExecutionID, error) {
	if s == "" {
		return nil, nil
	}
	id, err := ffd.ParseExecutionID(s)
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// cursor is the next page's cursor as a flag value; "" on the last page.
func cursor[T fmt.Stringer](next *T) string {
	if next == nil {
		return ""
	}
	return (*next).String()
}

// printPage prints one page of a listing: as JSON, the items under key
// and the next page's cursor (null on the last page); as a table, a row
// per item and the flag that fetches the next page.
func printPage[T any](o output, w io.Writer, key string, items []T, next string, toJSON func(T) map[string]any,
	header string, row func(*tabwriter.Writer, T)) error {
	js := make([]map[string]any, len(items))
	for i, x := range items {
		js[i] = toJSON(x)
	}
	out := map[string]any{key: js, "next": nil}
	if next != "" {
		out["next"] = next
	}
	return o.print(w, out, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, header)
		for _, x := range items {
			row(tw, x)
		}
		if next != "" {
			fmt.Fprintf(tw, "next page: --after %s\n", next)
		}
	})
}

// ExecCancelCmd cancels an execution.
type ExecCancelCmd struct {
	output
	ID     string `arg:"" help:"Execution id: {fp:N}:<uuid>, or the bare uuid."`
	Reason string `name:"reason" default:"cancelled by operator" help:"Recorded as cancellation_reason."`
	By     string `name:"by" default:"ffd-cli" help:"Recorded as cancelled_by."`
}

// Run cancels.
func (c *ExecCancelCmd) Run(ctx context.Context, g *Globals) error {
	client, x, err := g.execution(ctx, c.ID)
	if err != nil {
		return err
	}
	id := x.ID
	out, err := client.Cancel(ctx, id, c.Reason, c.By)
	if err != nil {
		return err
	}
	return c.print(g.stdout, map[string]any{"execution_id": id.String(), "state": out.State, "repeated": out.Repeated},
		func(tw *tabwriter.Writer) {
			if out.Repeated {
				fmt.Fprintf(tw, "%s was already cancelled\n", id)
			} else {
				fmt.Fprintf(tw, "%s cancelled\n", id)
			}
		})
}

func flowJSON(f *ffd.Flow) map[string]any {
	groups := make([]map[string]any, len(f.Groups))
	for i, gr := range f.Groups {
		groups[i] = map[string]any{"downstream_id": gr.Downstream.String(), "policy": gr.Policy.Kind, "k": gr.Policy.K,
			"on_satisfied": gr.Policy.OnSatisfied, "total": gr.Counts.Total, "success_count": gr.Counts.Success,
			"fail_count": gr.Counts.Fail, "skip_count": gr.Counts.Skip, "decision": gr.Decision}
	}
	members := make([]string, len(f.CancelledMembers))
	for i, m := range f.CancelledMembers {
		members[i] = m.String()
	}
	return map[string]any{"flow_id": f.ID.String(), "namespace": f.Namespace, "kind": f.Kind, "state": f.State,
		"graph_revision": f.GraphRevision, "node_count": f.NodeCount, "edge_count": f.EdgeCount,
		"cancellation_policy": f.CancellationPolicy, "cancel_reason": f.CancelReason, "cancelled_members": members,
		"tags": f.Tags, "created_at": f.CreatedAt, "terminal_at": f.TerminalAt, "edge_groups": groups, "rerun_of": f.RerunOf,
		"parent_execution_id": f.Parent, "version": f.Version, "compensation": f.Compensation,
		"compensation_flow_id": f.CompensationFlow, "compensation_of": f.CompensationOf}
}

func policyString(p ffd.Policy) string {
	switch p.Kind {
	case ffd.Quorum:
		return fmt.Sprintf("quorum(%d,%s)", p.K, p.OnSatisfied)
	case ffd.AnyOf:
		return "any_of(" + string(p.OnSatisfied) + ")"
	}
	return string(p.Kind)
}

// FlowListCmd lists flows.
type FlowListCmd struct {
	output
	Namespace string `name:"namespace" help:"Only this namespace."`
	State     string `name:"state" help:"Only this state (open, completed, failed, cancelled)."`
	After     string `name:"after" help:"Cursor: the last flow id of the previous page."`
	Limit     int    `name:"limit" default:"50" help:"Page size (1..1000)."`
}

// Run prints one page.
func (c *FlowListCmd) Run(ctx context.Context, g *Globals) error {
	p := ffd.ListFlowsParams{Namespace: c.Namespace, State: ffd.FlowState(c.State), Limit: c.Limit}
	if c.After != "" {
		id, err := ffdtype.ParseUUID("flow id", c.After)
		if err != nil {
			return err
		}
		p.After = &id
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	page, err := client.ListFlows(ctx, p)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "flows", page.Flows, cursor(page.Next), flowJSON,
		"FLOW\tKIND\tSTATE\tNODES\tEDGES\tCREATED", func(tw *tabwriter.Writer, f *ffd.Flow) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\n", f.ID, f.Kind, f.State, f.NodeCount, f.EdgeCount, ts(&f.CreatedAt))
		})
}

// FlowCancelCmd cancels a flow.
type FlowCancelCmd struct {
	output
	ID     string `arg:"" help:"Flow id."`
	Policy string `name:"policy" default:"cancel_all" enum:"flow_only,cancel_all,cancel_pending" help:"flow_only, cancel_all or cancel_pending."`
	Reason string `name:"reason" default:"cancelled by operator" help:"Recorded on the flow and its cancelled members."`
}

// Run cancels.
func (c *FlowCancelCmd) Run(ctx context.Context, g *Globals) error {
	client, id, err := g.flow(ctx, c.ID)
	if err != nil {
		return err
	}
	res, err := client.CancelFlow(ctx, id, ffd.CancelPolicy(c.Policy), c.Reason)
	if err != nil {
		return err
	}
	members := make([]string, len(res.Members))
	for i, m := range res.Members {
		members[i] = m.String()
	}
	return c.print(g.stdout, map[string]any{"flow_id": id.String(), "policy": res.Policy, "cancelled_members": members, "repeated": res.Repeated},
		func(tw *tabwriter.Writer) {
			verb := "cancelled"
			if res.Repeated {
				verb = "was already cancelled"
			}
			fmt.Fprintf(tw, "flow %s %s (%s); members cancelled: %d\n", id, verb, res.Policy, len(members))
			if len(members) > 0 {
				fmt.Fprintln(tw, strings.Join(members, "\n"))
			}
		})
}
