package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/leases"
)

// LaneCmd groups the lane control commands.
type LaneCmd struct {
	Pause  LanePauseCmd  `cmd:"" help:"Stop every worker from claiming in a lane; running executions finish."`
	Resume LaneResumeCmd `cmd:"" help:"Let workers claim in a lane again."`
	Limit  LaneLimitCmd  `cmd:"" help:"Cap a lane's running executions across every worker (0 removes the cap)."`
	Rate   LaneRateCmd   `cmd:"" help:"Limit how often a lane's executions start (0 removes the limit)."`
	Key    LaneKeyCmd    `cmd:"" help:"Configure a concurrency key of a lane: running limit, rate, weight."`
	Keys   LaneKeysCmd   `cmd:"" help:"List a lane's concurrency keys: what runs, what is due, what is held back."`
	List   LaneListCmd   `cmd:"" help:"List lanes under control: paused, capped, rate-limited or keyed."`
}

// laneArg names one lane.
type laneArg struct {
	output
	Lane string `arg:"" help:"Lane."`
	newLane
}

// newLane is the --new flag of the lane settings.
type newLane struct {
	New bool `help:"The lane has no settings and no live executions yet: configure it ahead of its first execution (without it, such a lane is refused as not found, to catch a misspelt name)."`
}

// hint adds to a lane not found what to do about it.
func (n newLane) hint(err error) error {
	var nf *ffd.NotFoundError
	if errors.As(err, &nf) && nf.Object == "lane" {
		return fmt.Errorf("%w: it has no settings and no live executions; check its name, or pass --new to configure it ahead of its first execution", err)
	}
	return err
}

// opts are the options of a lane setting.
func (n newLane) opts() []ffd.LaneOption {
	if n.New {
		return []ffd.LaneOption{ffd.NewLane()}
	}
	return nil
}

func (c *laneArg) show(g *Globals, l *ffd.Lane) error {
	return c.print(g.stdout, laneJSON(l), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "lane %s paused=%v max_running=%s rate=%s keyed=%v\n", l.Name, l.Paused, capString(l.MaxRunning),
			strings.ReplaceAll(leases.RateString(l.Rate), " ", "_"), l.Keyed)
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
	l, err := client.PauseLane(ctx, c.Lane, c.opts()...)
	if err != nil {
		return c.hint(err)
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
	l, err := client.ResumeLane(ctx, c.Lane, c.opts()...)
	if err != nil {
		return c.hint(err)
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
	l, err := client.SetLaneLimit(ctx, c.Lane, c.Max, c.opts()...)
	if err != nil {
		return c.hint(err)
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
	return printPage(c.output, g.stdout, "lanes", ls, "", laneJSON,
		"LANE\tPAUSED\tMAX RUNNING\tRATE\tTOKENS\tRUNNING\tDUE\tKEYS\tKEYS HELD\tWAITING ON KEYS\tUPDATED",
		func(tw *tabwriter.Writer, l *ffd.Lane) {
			keys, held, waiting := "-", "-", "-"
			if l.Keyed {
				keys, held, waiting = fmt.Sprint(l.Keys), fmt.Sprint(l.KeysHeld), fmt.Sprint(l.WaitingHeld)
			}
			fmt.Fprintf(tw, "%s\t%v\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", l.Name, l.Paused, capString(l.MaxRunning),
				leases.RateString(l.Rate), tokenString(l.Rate, l.Tokens), l.Running, l.Due, keys, held, waiting, ts(&l.UpdatedAt))
		})
}

func laneJSON(l *ffd.Lane) map[string]any {
	return map[string]any{"lane": l.Name, "paused": l.Paused, "max_running": l.MaxRunning, "rate": rateJSON(l.Rate),
		"tokens": tokenJSON(l.Rate, l.Tokens), "keyed": l.Keyed, "running": l.Running, "due": l.Due, "keys": l.Keys,
		"keys_held": l.KeysHeld, "waiting_on_keys": l.WaitingHeld, "updated_at": l.UpdatedAt}
}

func rateJSON(r *ffd.Rate) any {
	if r == nil {
		return nil
	}
	return map[string]any{"count": r.Count, "per": r.Per.String(), "burst": r.Burst}
}

func tokenJSON(r *ffd.Rate, tokens float64) any {
	if r == nil {
		return nil
	}
	return tokens
}

func tokenString(r *ffd.Rate, tokens float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", tokens)
}

// LaneRateCmd sets a lane's rate limit.
type LaneRateCmd struct {
	laneArg
	Rate  string `arg:"" help:"Starts per interval, such as 600/1m or 10/s; 0 removes the limit."`
	Burst int    `help:"Most starts at once after a quiet spell (default: one second's worth, at least 1)."`
}

// Run sets the rate.
func (c *LaneRateCmd) Run(ctx context.Context, g *Globals) error {
	r, err := parseRateArg(c.Rate, c.Burst)
	if err != nil {
		return err
	}
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	l, err := client.SetLaneRate(ctx, c.Lane, r, c.opts()...)
	if err != nil {
		return c.hint(err)
	}
	return c.show(g, l)
}

// parseRateArg reads a rate argument; "0" is no rate.
func parseRateArg(s string, burst int) (ffd.Rate, error) {
	if s == "0" {
		return ffd.Rate{Burst: burst}, nil
	}
	r, err := leases.ParseRate(s)
	r.Burst = burst
	return r, err
}

// LaneKeyCmd configures a concurrency key.
type LaneKeyCmd struct {
	output
	Lane       string `arg:"" help:"Lane."`
	Key        string `arg:"" help:"Concurrency key; \"\" for the lane's executions without a key (--weight only)."`
	MaxRunning *int   `help:"Most of the key's executions running at once, across every worker; 0 removes the cap."`
	Rate       string `help:"Starts of the key per interval, such as 100/1m; 0 removes the limit."`
	Burst      int    `help:"With --rate: most starts at once (default: one second's worth, at least 1)."`
	Weight     *int   `help:"The key's share of each round of turns (1..1000)."`
	Order      string `enum:",fair,strict" default:"" help:"strict: run the key's executions one at a time in creation order (its running limit is 1); fair: turns by priority again."`
	Forget     bool   `help:"Clear the key's limits and weight; the sweep forgets it once it has no live execution."`
	newLane
}

// Run configures the key.
func (c *LaneKeyCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	if c.Forget {
		if c.MaxRunning != nil || c.Rate != "" || c.Weight != nil || c.Order != "" {
			return errors.New("--forget takes no other setting")
		}
		if err := client.ForgetKey(ctx, c.Lane, c.Key); err != nil {
			return err
		}
		return c.print(g.stdout, map[string]any{"lane": c.Lane, "key": c.Key, "forgotten": true}, func(tw *tabwriter.Writer) {
			fmt.Fprintf(tw, "key %q of lane %s: limits cleared; forgotten once idle\n", c.Key, c.Lane)
		})
	}
	p := ffd.KeyParams{MaxRunning: c.MaxRunning, Weight: c.Weight}
	if c.Order != "" {
		o := ffd.KeyOrder(c.Order)
		p.Order = &o
	}
	if c.Rate != "" {
		r, err := parseRateArg(c.Rate, c.Burst)
		if err != nil {
			return err
		}
		p.Rate = &r
	} else if c.Burst != 0 {
		return errors.New("--burst goes with --rate")
	}
	k, err := client.SetKey(ctx, c.Lane, c.Key, p, c.opts()...)
	if err != nil {
		return c.hint(err)
	}
	return c.print(g.stdout, keyJSON(k), func(tw *tabwriter.Writer) {
		fmt.Fprintf(tw, "key %q of lane %s max_running=%s rate=%s weight=%d order=%s\n", k.Key, k.Lane, capString(k.MaxRunning),
			strings.ReplaceAll(leases.RateString(k.Rate), " ", "_"), k.Weight, k.Order)
	})
}

// LaneKeysCmd lists a lane's keys.
type LaneKeysCmd struct {
	output
	Lane  string `arg:"" help:"Lane."`
	After string `help:"List keys after this one."`
	Limit int    `default:"100" help:"Most keys to list (1..1000)."`
	Held  bool   `help:"Only keys holding due executions back."`
}

// Run prints them.
func (c *LaneKeysCmd) Run(ctx context.Context, g *Globals) error {
	client, err := g.client(ctx)
	if err != nil {
		return err
	}
	ks, err := client.ListKeys(ctx, ffd.ListKeysParams{Lane: c.Lane, After: c.After, Limit: c.Limit})
	if err != nil {
		return err
	}
	next := ""
	if len(ks) == c.Limit {
		next = ks[len(ks)-1].Key
	}
	if c.Held {
		var held []*ffd.Key
		for _, k := range ks {
			if k.Held {
				held = append(held, k)
			}
		}
		ks = held
	}
	return printPage(c.output, g.stdout, "keys", ks, next, keyJSON,
		"KEY\tORDER\tMAX RUNNING\tRATE\tTOKENS\tWEIGHT\tRUNNING\tDUE\tHELD\tLAST SERVED",
		func(tw *tabwriter.Writer, k *ffd.Key) {
			name := k.Key
			if name == "" {
				name = "(no key)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%v\t%s\n", name, k.Order, capString(k.MaxRunning), leases.RateString(k.Rate),
				tokenString(k.Rate, k.Tokens), k.Weight, k.Running, k.Due, k.Held, ts(k.ServedAt))
		})
}

func keyJSON(k *ffd.Key) map[string]any {
	return map[string]any{"lane": k.Lane, "key": k.Key, "max_running": k.MaxRunning, "rate": rateJSON(k.Rate),
		"tokens": tokenJSON(k.Rate, k.Tokens), "weight": k.Weight, "configured": k.Configured, "running": k.Running,
		"due": k.Due, "held": k.Held, "served_at": k.ServedAt, "order": k.Order}
}

func capString(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}
