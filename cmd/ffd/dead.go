package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/flowfabric/ffd"
)

// DeadCmd groups the dead-letter commands.
type DeadCmd struct {
	List  DeadListCmd  `cmd:"" help:"List dead letters: solo executions that ended failed or expired and were not rerun, with their last error."`
	Rerun DeadRerunCmd `cmd:"" help:"Rerun dead letters in bulk, by id or by namespace, lane, kind and error text; --dry-run shows the selection."`
}

// deadFilter is the selection both commands take.
type deadFilter struct {
	Namespace string `name:"namespace" help:"Only this namespace."`
	Lane      string `name:"lane" help:"Only this lane."`
	Kind      string `name:"kind" help:"Only this kind."`
	Error     string `name:"error" help:"Only those whose last error contains this text (any case)."`
}

func (f deadFilter) filter() ffd.DeadLetterFilter {
	return ffd.DeadLetterFilter{Namespace: f.Namespace, Lane: f.Lane, Kind: f.Kind, ErrorContains: f.Error}
}

// DeadListCmd lists dead letters.
type DeadListCmd struct {
	output
	deadFilter
	After string `name:"after" help:"Cursor: the last execution id of the previous page."`
	Limit int    `name:"limit" default:"50" help:"Page size (1..1000)."`
}

// Run prints one page, each dead letter with its attempts and last error.
func (c *DeadListCmd) Run(ctx context.Context, g *Globals) error {
	after, err := afterFlag(c.After)
	if err != nil {
		return err
	}
	p := ffd.ListDeadParams{DeadLetterFilter: c.filter(), After: after, Limit: c.Limit}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	page, err := client.ListDeadLetters(ctx, p)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "dead_letters", page.Executions, cursor(page.Next), execJSON,
		"EXECUTION\tKIND\tLANE\tSTATE\tATTEMPTS\tENDED\tLAST ERROR", deadRow)
}

func deadRow(tw *tabwriter.Writer, x *ffd.Execution) {
	fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", x.ID, dash(x.Kind), x.Lane, x.State, x.Attempt, x.MaxAttempts,
		ts(x.TerminalAt), dash(oneLine(x.LastError, 80)))
}

// DeadRerunCmd reruns dead letters in bulk.
type DeadRerunCmd struct {
	output
	deadFilter
	IDs    []string `arg:"" optional:"" name:"id" help:"Dead letters to rerun: {fp:N}:<uuid>, or the bare uuid. Not with the filters."`
	All    bool     `name:"all" help:"Select every dead letter (a rerun with no ids and no filter is refused without it)."`
	DryRun bool     `name:"dry-run" help:"Print the selection; rerun nothing."`
	Limit  int      `name:"limit" default:"1000" help:"Rerun at most this many (1..10000); the output says when more matched."`
}

// Run reruns the selection, or prints it with --dry-run.
func (c *DeadRerunCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	p := ffd.RerunDeadParams{DeadLetterFilter: c.filter(), All: c.All, DryRun: c.DryRun, Limit: c.Limit}
	for _, s := range c.IDs {
		id, err := executionID(ctx, client, s)
		if err != nil {
			return err
		}
		p.IDs = append(p.IDs, id)
	}
	out, err := client.RerunDeadLetters(ctx, p)
	if err != nil {
		return err
	}
	return c.print(g.stdout, deadRerunJSON(out), func(tw *tabwriter.Writer) {
		if out.DryRun {
			fmt.Fprintf(tw, "dry run: %d dead letters would be rerun\n\n", len(out.Selected))
			fmt.Fprintln(tw, "EXECUTION\tKIND\tLANE\tSTATE\tATTEMPTS\tENDED\tLAST ERROR")
			for _, x := range out.Selected {
				deadRow(tw, x)
			}
		} else {
			fmt.Fprintf(tw, "%d of %d selected dead letters rerun\n\nRERUN\tOF\tKIND\tLANE\n", len(out.Reruns), len(out.Selected))
			for _, x := range out.Reruns {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", x.ID, x.RerunOf, dash(x.Kind), x.Lane)
			}
		}
		if out.More {
			fmt.Fprintf(tw, "more dead letters match than --limit %d: run again for the rest\n", c.Limit)
		}
	})
}

func deadRerunJSON(out *ffd.DeadRerun) map[string]any {
	sel, made := make([]map[string]any, len(out.Selected)), make([]map[string]any, len(out.Reruns))
	for i, x := range out.Selected {
		sel[i] = execJSON(x)
	}
	for i, x := range out.Reruns {
		made[i] = execJSON(x)
	}
	return map[string]any{"dry_run": out.DryRun, "selected": sel, "reruns": made, "more": out.More}
}
