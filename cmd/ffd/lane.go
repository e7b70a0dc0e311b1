package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/flowfabric/ffd"
)

// LaneCmd groups the lane control commands.
type LaneCmd struct {
	Pause  LanePauseCmd  `cmd:"" help:"Stop every worker from claiming in a lane; running executions finish."`
	Resume LaneResumeCmd `cmd:"" help:"Let workers claim in a lane again."`
	Limit  LaneLimitCmd  `cmd:"" help:"Cap a lane's running executions across every worker (0 removes the cap)."`
	List   LaneListCmd   `cmd:"" help:"List paused and capped lanes."`
}

// laneArg names one lane.
type laneArg struct {
	output
	Lane string `arg:"" help:"Lane."`
}

func (c *laneArg) show(g *Globals, l *ffd.Lane) error {
	return c.print(g.stdout, laneJSON(l), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "lane %s paused=%v max_running=%s\n", l.Name, l.Paused, capString(l.MaxRunning))
	})
}

// LanePauseCmd pauses a lane.
type LanePauseCmd struct{ laneArg }

// Run pauses it.
func (c *LanePauseCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	l, err := client.PauseLane(ctx, c.Lane)
	if err != nil {
		return err
	}
	return c.show(g, l)
}

// LaneResumeCmd resumes a lane.
type LaneResumeCmd struct{ laneArg }

// Run resumes it.
func (c *LaneResumeCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	l, err := client.ResumeLane(ctx, c.Lane)
	if err != nil {
		return err
	}
	return c.show(g, l)
}

// LaneLimitCmd caps a lane.
type LaneLimitCmd struct {
	laneArg
	Max int `arg:"" help:"Most executions running at once in the lane, across every worker; 0 removes the cap."`
}

// Run sets the cap.
func (c *LaneLimitCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	l, err := client.SetLaneLimit(ctx, c.Lane, c.Max)
	if err != nil {
		return err
	}
	return c.show(g, l)
}

// LaneListCmd lists controlled lanes.
type LaneListCmd struct {
	output
}

// Run prints them.
func (c *LaneListCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	ls, err := client.ListLanes(ctx)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "lanes", ls, "", laneJSON, "LANE\tPAUSED\tMAX RUNNING\tUPDATED",
		func(tw *tabwriter.Writer, l *ffd.Lane) {
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\n", l.Name, l.Paused, capString(l.MaxRunning), ts(&l.UpdatedAt))
		})
}

func laneJSON(l *ffd.Lane) map[string]any {
	return map[string]any{"lane": l.Name, "paused": l.Paused, "max_running": l.MaxRunning, "updated_at": l.UpdatedAt}
}

func capString(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
