package ffd

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/trigger"
)

// Flows started by events (docs/workflows.md, "Flows started by events").
type (
	Trigger = ffdtype.Trigger
	Event   = ffdtype.Event
)

// TriggerParams is a trigger to create: each event named Event in
// Namespace whose payload contains Filter creates Execution, or submits
// Flow (exactly one of them). Name: 1-128 of [A-Za-z0-9_.:-], unique.
// Namespace defaults to the client's. The target is checked in full
// here, as a schedule's is: a template that could not start is refused
// now, not when an event comes. Its execution takes no idempotency key
// (each event's is derived), its flow no id (each event's is derived).
type TriggerParams struct {
	Name      string
	Namespace string
	Event     string
	Filter    map[string]any
	Paused    bool
	Execution *CreateParams
	Flow      *SubmitFlowParams
}

// CreateTrigger stores a trigger. From then on, every daemon fires the
// events it matches, each once. A name in use is a *ConflictError; a bad
// trigger a *ValidationError; neither writes anything.
func (c *Client) CreateTrigger(ctx context.Context, p TriggerParams) (*Trigger, error) {
	if p.Namespace == "" {
		p.Namespace = c.cfg.Namespace
	}
	t, err := trigger.Create(ctx, c.pool, c.limits, trigger.Params{Name: p.Name, Namespace: p.Namespace, Event: p.Event,
		Filter: p.Filter, Paused: p.Paused, Execution: p.Execution, Flow: p.Flow})
	if err != nil {
		return nil, err
	}
	return &t.Trigger, nil
}

// ListTriggers lists every trigger, by name, with how many executions
// and flows each started.
func (c *Client) ListTriggers(ctx context.Context) ([]*Trigger, error) {
	ts, err := store.ListTriggers(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	out := make([]*Trigger, len(ts))
	for i, t := range ts {
		out[i] = &t.Trigger
	}
	return out, nil
}

// DeleteTrigger deletes a trigger: events published from then on start
// nothing of it (what it started stays). A trigger that does not exist
// is a *NotFoundError.
func (c *Client) DeleteTrigger(ctx context.Context, name string) error {
	return trigger.Delete(ctx, c.pool, name)
}

// PublishParams is an event to publish. Name: 1-128 of [A-Za-z0-9_.:-].
// Key (1-512 bytes) makes the event once: a key published before in the
// namespace, under the name, is that event, and starts nothing again;
// empty, the event is its own. Payload (or JSON, encoded) is JSON, at
// most the client's MaxPayloadBytes; triggers' filters match against it.
// Namespace defaults to the client's.
type PublishParams struct {
	Namespace string
	Name      string
	Key       string
	Payload   []byte
	JSON      any
}

// Published is what PublishEvent did: Existed when the key was published
// before, and Event is that earlier event.
type Published struct {
	Event   *Event
	Existed bool
}

// PublishEvent publishes an event. A daemon fires it once it is
// committed: each matching trigger starts its target, once per event.
func (c *Client) PublishEvent(ctx context.Context, p PublishParams) (*Published, error) {
	return c.publish(ctx, c.pool, p)
}

// PublishEventTx is PublishEvent inside tx: the event fires if tx
// commits, never if it rolls back. (From SQL, in any language:
// SELECT ff_publish_event(namespace, name, key, payload).)
func (c *Client) PublishEventTx(ctx context.Context, tx pgx.Tx, p PublishParams) (*Published, error) {
	return c.publish(ctx, tx, p)
}

func (c *Client) publish(ctx context.Context, db store.DB, p PublishParams) (*Published, error) {
	if p.Namespace == "" {
		p.Namespace = c.cfg.Namespace
	}
	cp := CreateParams{Payload: p.Payload, JSON: p.JSON}
	if err := leases.EncodePayload(&cp); err != nil {
		return nil, err
	}
	e, existed, err := trigger.Publish(ctx, db, c.limits, trigger.Publication{Namespace: p.Namespace, Name: p.Name, Key: p.Key, Payload: cp.Payload})
	if err != nil {
		return nil, err
	}
	return &Published{Event: e, Existed: existed}, nil
}

// WaitEvent waits until a published event has been fired (its triggers
// started what they start: TriggerFlowID names a flow one started) and
// returns it; ctx bounds the wait. An unknown id is a *NotFoundError.
func (c *Client) WaitEvent(ctx context.Context, id uuid.UUID) (*Event, error) {
	tick := time.NewTicker(min(c.cfg.WaitPollInterval, 50*time.Millisecond))
	defer tick.Stop()
	for {
		e, err := c.GetEvent(ctx, id)
		if err != nil || e.FiredAt != nil {
			return e, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for event %s to fire: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// GetEvent reads a published event: whether it was fired, and what its
// triggers started. An unknown id is a *NotFoundError.
func (c *Client) GetEvent(ctx context.Context, id uuid.UUID) (*Event, error) {
	e, err := store.GetEvent(ctx, c.pool, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, &ffdtype.NotFoundError{Object: "event", ID: id.String()}
	}
	return e, err
}

// TriggerFlowID is the id of the flow the trigger name submits for the
// event id: the same pair always names the same flow.
func TriggerFlowID(name string, event uuid.UUID) uuid.UUID { return trigger.FlowID(name, event) }
