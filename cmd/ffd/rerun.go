package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/flowfabric/ffd"
)

// ExecRerunCmd reruns a solo execution.
type ExecRerunCmd struct {
	output
	ID string `arg:"" help:"Execution id: {fp:N}:<uuid>, or the bare uuid."`
}

// Run creates the rerun and prints its id.
func (c *ExecRerunCmd) Run(ctx context.Context, g *Globals) error {
	client, old, err := g.execution(ctx, c.ID)
	if err != nil {
		return err
	}
	x, err := client.RerunExecution(ctx, old.ID)
	if err != nil {
		return err
	}
	return c.print(g.stdout, execJSON(x), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "%s reruns %s (%s): %s in lane %s\n", x.ID, old.ID, old.State, x.State, x.Lane)
	})
}

// FlowRerunCmd reruns a flow.
type FlowRerunCmd struct {
	output
	ID string `arg:"" help:"Flow id."`
}

// Run creates the rerun and prints which steps it carries over and which
// run again.
func (c *FlowRerunCmd) Run(ctx context.Context, g *Globals) error {
	client, id, err := g.flow(ctx, c.ID)
	if err != nil {
		return err
	}
	sub, err := client.RerunFlow(ctx, id)
	if err != nil {
		return err
	}
	return c.print(g.stdout, submittedJSON(sub), func(tw *tabwriter.Writer) {
		// A sub-flow's rerun is its outermost parent's.
		fmt.Fprintf(tw, "flow %s reruns %s\n\nSTEP\tSTATE\tEXECUTION\n", sub.Flow.ID, sub.Flow.RerunOf)
		for _, x := range sortedSteps(sub.Executions) {
			what := string(x.State)
			if x.State == "completed" {
				what = "carried (completed, not run again)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", x.Step, what, x.ID)
		}
	})
}

// submittedJSON is a submitted flow (a submission, a rerun) as JSON: the
// flow, and its steps by name.
func submittedJSON(sub *ffd.SubmittedFlow) map[string]any {
	out := flowJSON(sub.Flow)
	steps := map[string]any{}
	for step, x := range sub.Executions {
		steps[step] = execJSON(x)
	}
	out["steps"] = steps
	return out
}
