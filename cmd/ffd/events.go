package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/outbox"
)

// EventsCmd groups the outbox commands.
type EventsCmd struct {
	Tail         EventsTailCmd         `cmd:"" help:"Print outbox events as JSON lines."`
	DropConsumer EventsDropConsumerCmd `cmd:"" name:"drop-consumer" help:"Remove a named cursor consumer (retention stops waiting for it)."`
	DropSlot     EventsDropSlotCmd     `cmd:"" name:"drop-slot" help:"Drop a WAL consumer's replication slot (it stops retaining WAL)."`
}

// EventsTailCmd prints events.
type EventsTailCmd struct {
	Stream    string        `name:"stream" default:"${outbox_stream}" enum:"completion,lease,all" help:"completion, lease or all."`
	Consumer  string        `name:"consumer" help:"Durable named consumer: resumes after its cursor and acknowledges what it printed. Without it the cursor is ephemeral."`
	FromStart bool          `name:"from-start" xor:"start" help:"Start at the oldest retained event (the default for a new cursor)."`
	FromNow   bool          `name:"from-now" xor:"start" help:"Start after everything committed so far."`
	Follow    bool          `name:"follow" short:"f" help:"Keep printing new events until interrupted."`
	WAL       bool          `name:"wal" help:"Follow the WAL stream (logical replication, commit order) instead of the cursor."`
	Slot      string        `name:"slot" help:"Replication slot of the WAL consumer (with --wal); created on first use."`
	Limit     int           `name:"limit" help:"Stop after this many events (0: no limit)."`
	Poll      time.Duration `name:"poll-interval" default:"${consumer_poll_interval}" help:"Fallback poll interval when following."`
}

// Run prints events.
func (c *EventsTailCmd) Run(ctx context.Context, g *Globals) error {
	stream, err := outbox.ParseStream(c.Stream)
	if err != nil {
		return err
	}
	out := &jsonLines{enc: json.NewEncoder(g.stdout)}
	if c.WAL {
		return c.wal(ctx, g, stream, out)
	}
	if c.Slot != "" {
		return errors.New("--slot goes with --wal")
	}
	// Following, it waits for a database that is down or restarting, as
	// it does once running; a one-shot read fails at once.
	var pool *pgxpool.Pool
	if c.Follow {
		pool, err = g.waitedPool(ctx)
	} else {
		pool, err = g.checkedPool(ctx)
	}
	if err != nil || pool == nil {
		return err
	}
	defer pool.Close()
	start := ffdtype.FromStart
	if c.FromNow {
		start = ffdtype.FromNow
	}
	// The library's consumer does the work: a named consumer acknowledges
	// what was printed, an ephemeral cursor lives in memory; following, a
	// transient error (a terminated backend, a crash restart) is waited
	// out and the tail resumes from its cursor.
	return outbox.Consume(ctx, outbox.ConsumeConfig{
		Pool: pool, Name: c.Consumer, Stream: stream, Start: start, Limit: c.Limit, Once: !c.Follow,
		PollInterval: c.Poll, Logger: g.log,
		Handler: func(_ context.Context, _ pgx.Tx, ev []ffdtype.OutboxEvent) error { return out.write(ev) },
	})
}

func (c *EventsTailCmd) wal(ctx context.Context, g *Globals, stream ffdtype.OutboxStream, out *jsonLines) error {
	if c.Slot == "" {
		return errors.New("--wal needs --slot NAME: the replication slot that keeps this consumer's position")
	}
	if c.Consumer != "" || c.FromNow {
		return errors.New("--wal resumes from its slot: --consumer and --from-now do not apply")
	}
	if g.DatabaseURL == "" {
		return errNoDatabase
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	handler := func(_ context.Context, ev []ffdtype.OutboxEvent) error {
		var keep []ffdtype.OutboxEvent
		for _, e := range ev {
			if stream == ffdtype.StreamAll || e.Stream == stream {
				keep = append(keep, e)
			}
		}
		if c.Limit > 0 && out.n+len(keep) > c.Limit {
			keep = keep[:c.Limit-out.n]
		}
		if err := out.write(keep); err != nil {
			return err
		}
		if c.Limit > 0 && out.n >= c.Limit {
			cancel()
		}
		return nil
	}
	// A dropped connection is resumed from the slot's confirmed position;
	// permanent errors (no REPLICATION privilege, bad credentials, a slot
	// of another database, wal_level) end the command with their message.
	guard := g.session()
	retry := outbox.NewBackoff()
	for {
		started := false
		err := outbox.StreamWAL(ctx, ffdtype.WALConfig{ConnString: g.DatabaseURL, Slot: c.Slot, Logger: g.log, Handler: handler,
			Session: &guard, OnStart: func() { started = true }})
		if ctx.Err() != nil {
			return nil
		}
		if err == nil || !c.Follow || !outbox.Transient(err) {
			return err
		}
		if started {
			retry.Reset()
		}
		g.log.Warn("WAL stream interrupted; resuming from the slot", zap.Error(err), zap.Duration("retry_in", retry.Next()))
		if !retry.Wait(ctx) {
			return nil
		}
	}
}

// jsonLines writes one JSON object a line.
type jsonLines struct {
	mu  sync.Mutex
	enc *json.Encoder
	n   int
}

func (j *jsonLines) write(ev []ffdtype.OutboxEvent) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, e := range ev {
		if err := j.enc.Encode(e); err != nil {
			return err
		}
		j.n++
	}
	return nil
}

// EventsDropConsumerCmd removes a named consumer.
type EventsDropConsumerCmd struct {
	Name string `arg:"" help:"Consumer name."`
}

// Run drops the consumer.
func (c *EventsDropConsumerCmd) Run(ctx context.Context, g *Globals) error {
	pool, err := g.checkedPool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := outbox.Drop(ctx, pool, c.Name); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "consumer %s dropped\n", c.Name)
	return nil
}

// EventsDropSlotCmd drops a WAL consumer's slot.
type EventsDropSlotCmd struct {
	Slot string `arg:"" help:"Replication slot name."`
}

// Run drops the slot.
func (c *EventsDropSlotCmd) Run(ctx context.Context, g *Globals) error {
	if g.DatabaseURL == "" {
		return errNoDatabase
	}
	if err := outbox.DropSlot(ctx, g.DatabaseURL, c.Slot); err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "slot %s dropped\n", c.Slot)
	return nil
}
