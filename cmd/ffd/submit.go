package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
)

// FlowSubmitCmd submits a flow from a flow file.
type FlowSubmitCmd struct {
	output
	FlowFile  string `name:"flow-file" required:"" type:"existingfile" help:"A JSON file of ffd.SubmitFlowParams (docs/schedules.md, \"Flow files\"): nodes may carry a Flow (a sub-flow) and a Compensate step, the flow a Version and an OnFailure step."`
	Namespace string `name:"namespace" help:"Namespace of the flow (default: the file's, else default)."`
}

// Run submits the flow and prints its steps.
func (c *FlowSubmitCmd) Run(ctx context.Context, g *Globals) error {
	b, err := os.ReadFile(c.FlowFile)
	if err != nil {
		return badArg("--flow-file: %v", err)
	}
	fp, err := decodeFlowFile(c.FlowFile, b)
	if err != nil {
		return err
	}
	if c.Namespace != "" {
		fp.Flow.Namespace = c.Namespace
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	sub, err := client.SubmitFlow(ctx, *fp)
	if err != nil {
		return err
	}
	return c.print(g.stdout, submittedJSON(sub), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "flow %s submitted (%d steps)\n", sub.Flow.ID, len(sub.Executions))
		printLinks(tw, sub.Flow)
		fmt.Fprintln(tw, "\nSTEP\tSTATE\tLANE\tEXECUTION")
		for _, x := range sortedSteps(sub.Executions) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.Step, x.State, x.Lane, x.ID)
		}
	})
}

// VersionsCmd groups the commands of handler-set versions.
type VersionsCmd struct {
	List VersionsListCmd `cmd:"" help:"List the versions workers announced, with their pending and running executions and open flows."`
	Add  VersionsAddCmd  `cmd:"" help:"Announce versions, so that creates may name them before a worker serving them starts."`
}

// VersionsListCmd lists versions.
type VersionsListCmd struct {
	output
	Namespace string `name:"namespace" help:"Only this namespace (default: every namespace)."`
}

// Run lists the versions.
func (c *VersionsListCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	vs, err := client.ListVersions(ctx, c.Namespace)
	if err != nil {
		return err
	}
	rows := make([]map[string]any, len(vs))
	for i, v := range vs {
		rows[i] = map[string]any{"namespace": v.Namespace, "version": v.Version, "announced_at": v.AnnouncedAt,
			"last_seen_at": v.LastSeenAt, "live_executions": v.LiveExecutions, "live_flows": v.LiveFlows}
	}
	return c.print(g.stdout, rows, func(tw *tabwriter.Writer) {
		fmt.Fprintln(tw, "NAMESPACE\tVERSION\tANNOUNCED\tLAST SEEN\tPENDING+RUNNING\tOPEN FLOWS")
		for _, v := range vs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\n", v.Namespace, v.Version, ts(&v.AnnouncedAt), ts(&v.LastSeenAt), v.LiveExecutions, v.LiveFlows)
		}
	})
}

// VersionsAddCmd announces versions.
type VersionsAddCmd struct {
	Versions  []string `arg:"" help:"Versions to announce."`
	Namespace string   `name:"namespace" help:"Namespace to announce them in (default: default)."`
}

// Run announces the versions.
func (c *VersionsAddCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.clientIn(ctx, c.Namespace)
	if err != nil {
		return err
	}
	if err := client.AnnounceVersions(ctx, c.Versions...); err != nil {
		return err
	}
	_, err = fmt.Fprintf(g.stdout, "announced %d versions\n", len(c.Versions))
	return err
}
