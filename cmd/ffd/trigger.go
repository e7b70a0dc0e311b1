package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
)

// TriggerCmd groups the commands of flows started by events.
type TriggerCmd struct {
	Create  TriggerCreateCmd  `cmd:"" help:"Create a trigger: each event of a name starts an execution or a flow, once."`
	List    TriggerListCmd    `cmd:"" help:"List triggers."`
	Delete  TriggerDeleteCmd  `cmd:"" help:"Delete a trigger (what it started stays)."`
	Publish TriggerPublishCmd `cmd:"" help:"Publish an event; a key published before is that event, and starts nothing again."`
	Event   TriggerEventCmd   `cmd:"" help:"Show a published event: fired or not, what it started."`
}

// TriggerCreateCmd creates a trigger.
type TriggerCreateCmd struct {
	output
	Name      string `arg:"" help:"Trigger name."`
	Event     string `name:"event" required:"" help:"The event name it fires on."`
	Filter    string `name:"filter" help:"A JSON object the event's payload must contain."`
	Namespace string `name:"namespace" help:"Namespace of its events and of what it starts (default: default)."`
	Lane      string `name:"lane" help:"Each event creates an execution in this lane."`
	Kind      string `name:"kind" help:"The execution's kind."`
	FlowFile  string `name:"flow-file" type:"existingfile" help:"Each event submits this flow: a JSON file of ffd.SubmitFlowParams (as for schedules); unknown keys are refused."`
	Paused    bool   `name:"paused" help:"Create it paused."`
}

// Run creates the trigger.
func (c *TriggerCreateCmd) Run(ctx context.Context, g *Globals) error {
	p := ffd.TriggerParams{Name: c.Name, Event: c.Event, Namespace: c.Namespace, Paused: c.Paused}
	if c.Filter != "" {
		if err := json.Unmarshal([]byte(c.Filter), &p.Filter); err != nil || p.Filter == nil {
			return badArg("--filter is not a JSON object: %s", c.Filter)
		}
	}
	var err error
	if p.Execution, p.Flow, err = targetFlags(c.Lane, c.Kind, "", c.FlowFile, "event"); err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	t, err := client.CreateTrigger(ctx, p)
	if err != nil {
		return err
	}
	return c.print(g.stdout, triggerJSON(t), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "trigger %s created: each %s event starts %s\n", t.Name, t.Event, t.Target)
	})
}

func triggerJSON(t *ffd.Trigger) map[string]any {
	return map[string]any{"name": t.Name, "namespace": t.Namespace, "event": t.Event, "filter": t.Filter,
		"target": t.Target, "paused": t.Paused, "fired": t.Fired, "created_at": t.CreatedAt}
}

// TriggerListCmd lists triggers.
type TriggerListCmd struct {
	output
}

// Run prints every trigger.
func (c *TriggerListCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	ts, err := client.ListTriggers(ctx)
	if err != nil {
		return err
	}
	return printPage(c.output, g.stdout, "triggers", ts, "", triggerJSON, "NAME\tNAMESPACE\tEVENT\tFILTER\tTARGET\tPAUSED\tSTARTED",
		func(tw *tabwriter.Writer, t *ffd.Trigger) {
			filter := "-"
			if t.Filter != nil {
				b, _ := json.Marshal(t.Filter)
				filter = string(b)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\n", t.Name, t.Namespace, t.Event, filter, t.Target, t.Paused, t.Fired)
		})
}

// TriggerDeleteCmd deletes a trigger.
type TriggerDeleteCmd struct {
	Name string `arg:"" help:"Trigger name."`
}

// Run deletes it.
func (c *TriggerDeleteCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	if err := client.DeleteTrigger(ctx, c.Name); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "trigger %s deleted\n", c.Name)
	return nil
}

// TriggerPublishCmd publishes an event.
type TriggerPublishCmd struct {
	output
	Name      string `arg:"" help:"Event name."`
	Key       string `name:"key" help:"The event's key: a key published before is that event (default: a new event)."`
	Payload   string `name:"payload" help:"The event's JSON payload."`
	Namespace string `name:"namespace" help:"Namespace (default: default)."`
}

// Run publishes the event and prints its id.
func (c *TriggerPublishCmd) Run(ctx context.Context, g *Globals) error {
	if err := jsonFlag("--payload", c.Payload); err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	p, err := client.PublishEvent(ctx, ffd.PublishParams{Namespace: c.Namespace, Name: c.Name, Key: c.Key, Payload: []byte(c.Payload)})
	if err != nil {
		return err
	}
	out := eventJSON(p.Event)
	out["existed"] = p.Existed
	return c.print(g.stdout, out, func(tw *tabwriter.Writer) {
		what := "published"
		if p.Existed {
			what = "published before under this key: nothing new"
		}
		fmt.Fprintf(tw, "event %s (%s, key %s) %s\n", p.Event.ID, p.Event.Name, p.Event.Key, what)
	})
}

func eventJSON(e *ffd.Event) map[string]any {
	return map[string]any{"event_id": e.ID.String(), "namespace": e.Namespace, "name": e.Name, "key": e.Key,
		"payload": json.RawMessage(nonEmptyJSON(e.Payload)), "published_at": e.PublishedAt, "fired_at": e.FiredAt,
		"started": e.Started, "error": e.Error}
}

func nonEmptyJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}

// TriggerEventCmd shows an event.
type TriggerEventCmd struct {
	output
	ID string `arg:"" help:"Event id."`
}

// Run prints the event.
func (c *TriggerEventCmd) Run(ctx context.Context, g *Globals) error {
	id, err := ffdtype.ParseUUID("event id", c.ID)
	if err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	e, err := client.GetEvent(ctx, uuid.UUID(id))
	if err != nil {
		return err
	}
	return c.print(g.stdout, eventJSON(e), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "event %s (%s, key %s) published %s, fired %s, started %d\n", e.ID, e.Name, e.Key, ts(&e.PublishedAt), ts(e.FiredAt), e.Started)
		if e.Error != "" {
			fmt.Fprintf(tw, "error: %s\n", e.Error)
		}
	})
}
