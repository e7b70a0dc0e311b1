package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/flowfabric/ffd"
)

// ScheduleCmd groups the schedule commands.
type ScheduleCmd struct {
	Create ScheduleCreateCmd `cmd:"" help:"Create a schedule that creates an execution or submits a flow per tick."`
	List   ScheduleListCmd   `cmd:"" help:"List schedules."`
	Pause  SchedulePauseCmd  `cmd:"" help:"Pause a schedule."`
	Resume ScheduleResumeCmd `cmd:"" help:"Resume a schedule from its next tick after now."`
	Delete ScheduleDeleteCmd `cmd:"" help:"Delete a schedule (what it created stays)."`
}

// ScheduleCreateCmd creates a schedule.
type ScheduleCreateCmd struct {
	output
	Name      string `arg:"" help:"Schedule name."`
	Cron      string `name:"cron" required:"" help:"When: five fields (minute hour day month weekday), six with seconds first, or @hourly, @daily, @every 10m."`
	Timezone  string `name:"timezone" default:"${schedule_timezone}" help:"IANA time zone the cron spec is read in."`
	Missed    string `name:"missed" default:"${schedule_missed}" enum:"latest,skip,all" help:"Ticks missed while no daemon ran: latest (fire once), skip, all."`
	Namespace string `name:"namespace" help:"Namespace of what it creates (default: default)."`
	Lane      string `name:"lane" help:"Each tick creates an execution in this lane."`
	Kind      string `name:"kind" help:"The execution's kind."`
	Payload   string `name:"payload" help:"The execution's JSON payload (refused unless it is valid JSON)."`
	FlowFile  string `name:"flow-file" type:"existingfile" help:"Each tick submits this flow: a JSON file of ffd.SubmitFlowParams (docs/schedules.md); unknown keys are refused."`
	Paused    bool   `name:"paused" help:"Create it paused."`
	Replace   bool   `name:"replace" help:"If a schedule of this name exists, replace its definition (keeping its pause, and its next tick when --cron and --timezone are unchanged) instead of refusing."`
}

// Run creates the schedule.
func (c *ScheduleCreateCmd) Run(ctx context.Context, g *Globals) error {
	p := ffd.ScheduleParams{Name: c.Name, Namespace: c.Namespace, Cron: c.Cron, Timezone: c.Timezone, Missed: ffd.MissedPolicy(c.Missed), Paused: c.Paused}
	var err error
	if p.Execution, p.Flow, err = targetFlags(c.Lane, c.Kind, c.Payload, c.FlowFile, "tick"); err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	create, verb := client.CreateSchedule, "created"
	if c.Replace {
		create, verb = client.PutSchedule, "stored"
	}
	s, err := create(ctx, p)
	if err != nil {
		return err
	}
	return c.print(g.stdout, scheduleJSON(s), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "schedule %s %s; next run %s\n", s.Name, verb, ts(&s.NextRunAt))
	})
}

// ScheduleListCmd lists schedules.
type ScheduleListCmd struct {
	output
}

// Run prints every schedule.
func (c *ScheduleListCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	ss, err := client.ListSchedules(ctx)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "schedules", ss, "", scheduleJSON,
		"NAME\tCRON\tTIMEZONE\tTARGET\tMISSED\tPAUSED\tNEXT RUN\tFIRED", func(tw *tabwriter.Writer, s *ffd.Schedule) {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%s\t%d\n", s.Name, s.Cron, s.Timezone, s.Target, s.Missed, s.Paused, ts(&s.NextRunAt), s.Fired)
		})
}

// scheduleArg names one schedule.
type scheduleArg struct {
	output
	Name string `arg:"" help:"Schedule name."`
}

// set pauses or resumes the schedule and prints it.
func (c *scheduleArg) set(ctx context.Context, g *Globals, act func(*ffd.Client, context.Context, string) (*ffd.Schedule, error)) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	s, err := act(client, ctx, c.Name)
	if err != nil {
		return err
	}
	return c.print(g.stdout, scheduleJSON(s), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "schedule %s paused=%v, next run %s\n", s.Name, s.Paused, ts(&s.NextRunAt))
	})
}

// SchedulePauseCmd pauses a schedule.
type SchedulePauseCmd struct{ scheduleArg }

// Run pauses it.
func (c *SchedulePauseCmd) Run(ctx context.Context, g *Globals) error {
	return c.set(ctx, g, (*ffd.Client).PauseSchedule)
}

// ScheduleResumeCmd resumes a schedule.
type ScheduleResumeCmd struct{ scheduleArg }

// Run resumes it.
func (c *ScheduleResumeCmd) Run(ctx context.Context, g *Globals) error {
	return c.set(ctx, g, (*ffd.Client).ResumeSchedule)
}

// ScheduleDeleteCmd deletes a schedule.
type ScheduleDeleteCmd struct{ scheduleArg }

// Run deletes it.
func (c *ScheduleDeleteCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	if err := client.DeleteSchedule(ctx, c.Name); err != nil {
		return err
	}
	return c.print(g.stdout, map[string]any{"name": c.Name, "deleted": true}, func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "schedule %s deleted\n", c.Name)
	})
}

func scheduleJSON(s *ffd.Schedule) map[string]any {
	return map[string]any{"name": s.Name, "namespace": s.Namespace, "cron": s.Cron, "timezone": s.Timezone, "target": s.Target,
		"missed": s.Missed, "paused": s.Paused, "next_run_at": s.NextRunAt, "last_run_at": s.LastRunAt, "fired": s.Fired, "created_at": s.CreatedAt}
}

// targetFlags reads what a firing (a schedule's tick, a trigger's event)
// starts from the flags: an execution in lane (of kind, with payload),
// or the flow of flowFile; exactly one.
func targetFlags(lane, kind, payload, flowFile, each string) (*ffd.CreateParams, *ffd.SubmitFlowParams, error) {
	switch {
	case (lane == "") == (flowFile == ""):
		return nil, nil, badArg("give --lane (an execution per %s) or --flow-file (a flow per %s), not both", each, each)
	case flowFile != "":
		b, err := os.ReadFile(flowFile)
		if err != nil {
			return nil, nil, err
		}
		flow, err := decodeFlowFile(flowFile, b)
		return nil, flow, err
	}
	if err := jsonFlag("--payload", payload); err != nil {
		return nil, nil, err
	}
	return &ffd.CreateParams{Lane: lane, Kind: kind, Payload: []byte(payload)}, nil, nil
}

// jsonFlag refuses a flag's value that is set and not JSON, saying where.
func jsonFlag(flag, v string) error {
	if v == "" || json.Valid([]byte(v)) {
		return nil
	}
	var x any
	return badArg("%s is not valid JSON: %s", flag, jsonErrorAt([]byte(v), json.Unmarshal([]byte(v), &x)))
}
