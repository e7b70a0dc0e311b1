package ffd

import (
	"context"
	"errors"
	"strconv"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxLaneLimit bounds SetLaneLimit.
const MaxLaneLimit = 1_000_000

// Bounds of flow control (docs/flow-control.md).
const (
	// MaxKeyLength bounds CreateParams.ConcurrencyKey, in bytes.
	MaxKeyLength = leases.MaxKeyLength
	// MaxKeyLimit bounds a key's running limit.
	MaxKeyLimit = leases.MaxKeyLimit
	// MaxKeyWeight bounds a key's weight.
	MaxKeyWeight = leases.MaxKeyWeight
	// DefaultKeyWeight is a key's weight until SetKey changes it.
	DefaultKeyWeight = 1
)

// PauseLane stops every worker from claiming in lane, at once (the claim
// statement itself checks); running executions finish.
func (c *Client) PauseLane(ctx context.Context, lane string) (*Lane, error) {
	paused := true
	return c.setLane(ctx, lane, store.LaneChange{Paused: &paused})
}

// ResumeLane lets workers claim in lane again, and wakes them.
func (c *Client) ResumeLane(ctx context.Context, lane string) (*Lane, error) {
	paused := false
	return c.setLane(ctx, lane, store.LaneChange{Paused: &paused})
}

// SetLaneLimit caps lane's running executions at maxRunning across every
// worker (0 removes the cap). Claims in a capped lane are counted one
// after another, so the cap holds however many workers claim at once.
func (c *Client) SetLaneLimit(ctx context.Context, lane string, maxRunning int) (*Lane, error) {
	if maxRunning < 0 || maxRunning > MaxLaneLimit {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "max_running", strconv.Itoa(maxRunning), "want 0 (no cap) up to "+strconv.Itoa(MaxLaneLimit))
	}
	return c.setLane(ctx, lane, store.LaneChange{MaxRunning: &maxRunning})
}

// SetLaneRate limits how often lane's executions start, across every
// worker: rate.Count per rate.Per on average, at most rate.Burst at once
// (default one second's worth, at least 1). Claims beyond it wait, they
// do not fail: the executions stay pending, and workers claim again when
// the next token comes. A zero Rate removes the limit. A new rate starts
// with a full bucket.
func (c *Client) SetLaneRate(ctx context.Context, lane string, rate Rate) (*Lane, error) {
	if err := leases.NormalizeRate(&rate); err != nil {
		return nil, err
	}
	return c.setLane(ctx, lane, store.LaneChange{Rate: &rate})
}

func (c *Client) setLane(ctx context.Context, lane string, ch store.LaneChange) (*Lane, error) {
	if err := leases.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	return store.SetLane(ctx, c.pool, lane, ch)
}

// ListLanes lists the lanes under control (paused, capped, rate-limited
// or keyed), with what runs in each, what is due, and how many keys hold
// due executions back; every other lane is none of these.
func (c *Client) ListLanes(ctx context.Context) ([]*Lane, error) {
	return store.ListLanes(ctx, c.pool)
}

// KeyParams changes a concurrency key's control; nil fields stay as they
// are.
type KeyParams struct {
	// MaxRunning caps the key's running executions across every worker;
	// 0 removes the cap.
	MaxRunning *int
	// Rate limits how often the key's executions start (as SetLaneRate
	// for a lane); a zero Rate removes the limit.
	Rate *Rate
	// Weight is the key's share of each round of turns (1..MaxKeyWeight;
	// DefaultKeyWeight until set): a key of weight 3 may start three
	// executions in a round where a key of weight 1 starts one.
	Weight *int
}

// SetKey configures the concurrency key of a lane (docs/flow-control.md)
// and returns it as it now is. A configured key is kept while it has no
// execution; ForgetKey undoes it. The key need not have executions yet.
func (c *Client) SetKey(ctx context.Context, lane, key string, p KeyParams) (*Key, error) {
	if err := leases.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	if err := leases.ValidateKey("key", key); err != nil {
		return nil, err
	}
	ch := store.KeyChange{MaxRunning: p.MaxRunning, Weight: p.Weight}
	if p.MaxRunning != nil {
		if err := leases.ValidateKeyLimit("max_running", *p.MaxRunning); err != nil {
			return nil, err
		}
	}
	if p.Weight != nil {
		if err := leases.ValidateWeight(*p.Weight); err != nil {
			return nil, err
		}
	}
	if p.Rate != nil {
		r := *p.Rate
		if err := leases.NormalizeRate(&r); err != nil {
			return nil, err
		}
		ch.Rate = &r
	}
	return store.SetKey(ctx, c.pool, lane, key, ch)
}

// ForgetKey clears a configured key's limits and weight; once it has no
// live execution the daemon's sweep forgets it. A key that does not
// exist is a *NotFoundError.
func (c *Client) ForgetKey(ctx context.Context, lane, key string) error {
	if err := leases.ValidateName("lane", lane); err != nil {
		return err
	}
	if err := leases.ValidateKey("key", key); err != nil {
		return err
	}
	err := store.ForgetKey(ctx, c.pool, lane, key)
	if errors.Is(err, store.ErrKeyNotFound) {
		return &ffdtype.NotFoundError{Object: "key", ID: lane + "/" + key}
	}
	return err
}

// ListKeysParams pages through a lane's keys.
type ListKeysParams struct {
	// Lane is required.
	Lane string
	// After: keys after this one, in key order; "": from the first.
	After string
	// Limit: default 100, at most 1000.
	Limit int
}

// ListKeys lists a lane's keys in key order, with what runs and is due
// of each and whether its limits hold due executions back. The key ""
// stands for the lane's executions without a key.
func (c *Client) ListKeys(ctx context.Context, p ListKeysParams) ([]*Key, error) {
	if err := leases.ValidateName("lane", p.Lane); err != nil {
		return nil, err
	}
	if p.Limit == 0 {
		p.Limit = 100
	}
	if p.Limit < 1 || p.Limit > 1000 {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "limit", strconv.Itoa(p.Limit), "want 1..1000")
	}
	return store.ListKeys(ctx, c.pool, p.Lane, p.After, p.Limit)
}
