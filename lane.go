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

// LaneOption changes how a lane setting (PauseLane, ResumeLane,
// SetLaneLimit, SetLaneRate, SetKey) treats its lane.
type LaneOption func(*laneOptions)

type laneOptions struct{ newLane bool }

// NewLane lets a lane setting name a lane that has neither settings nor
// live executions yet: to configure a lane before its first execution.
// Without it, such a lane is a *NotFoundError, so that a misspelt lane
// name is caught instead of configuring a lane nothing runs in.
func NewLane() LaneOption { return func(o *laneOptions) { o.newLane = true } }

// PauseLane stops every worker from claiming in lane, at once (the claim
// statement itself checks); running executions finish. A lane with no
// settings and no live execution is a *NotFoundError unless opts has
// NewLane.
func (c *Client) PauseLane(ctx context.Context, lane string, opts ...LaneOption) (*Lane, error) {
	paused := true
	return c.setLane(ctx, lane, store.LaneChange{Paused: &paused}, opts)
}

// ResumeLane lets workers claim in lane again, and wakes them.
func (c *Client) ResumeLane(ctx context.Context, lane string, opts ...LaneOption) (*Lane, error) {
	paused := false
	return c.setLane(ctx, lane, store.LaneChange{Paused: &paused}, opts)
}

// SetLaneLimit caps lane's running executions at maxRunning across every
// worker (0 removes the cap). Claims in a capped lane are counted one
// after another, so the cap holds however many workers claim at once.
func (c *Client) SetLaneLimit(ctx context.Context, lane string, maxRunning int, opts ...LaneOption) (*Lane, error) {
	if maxRunning < 0 || maxRunning > MaxLaneLimit {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "max_running", strconv.Itoa(maxRunning), "want 0 (no cap) up to "+strconv.Itoa(MaxLaneLimit))
	}
	return c.setLane(ctx, lane, store.LaneChange{MaxRunning: &maxRunning}, opts)
}

// SetLaneRate limits how often lane's executions start, across every
// worker: rate.Count per rate.Per on average, at most rate.Burst at once
// (default one second's worth, at least 1). Claims beyond it wait, they
// do not fail: the executions stay pending, and workers claim again when
// the next token comes. A zero Rate removes the limit. A new rate starts
// with a full bucket.
func (c *Client) SetLaneRate(ctx context.Context, lane string, rate Rate, opts ...LaneOption) (*Lane, error) {
	if err := leases.NormalizeRate(&rate); err != nil {
		return nil, err
	}
	return c.setLane(ctx, lane, store.LaneChange{Rate: &rate}, opts)
}

func (c *Client) setLane(ctx context.Context, lane string, ch store.LaneChange, opts []LaneOption) (*Lane, error) {
	if err := leases.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	if err := c.knownLane(ctx, lane, opts); err != nil {
		return nil, err
	}
	return store.SetLane(ctx, c.pool, lane, ch)
}

// knownLane refuses a lane with no settings and no live execution,
// unless opts has NewLane.
func (c *Client) knownLane(ctx context.Context, lane string, opts []LaneOption) error {
	var o laneOptions
	for _, opt := range opts {
		opt(&o)
	}
	if o.newLane {
		return nil
	}
	known, err := store.LaneKnown(ctx, c.pool, lane)
	if err != nil {
		return err
	}
	if !known {
		return &ffdtype.NotFoundError{Object: "lane", ID: lane}
	}
	return nil
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
	// Order: OrderStrict runs the key's executions one at a time in the
	// order they were created (docs/intake.md): its running limit is 1,
	// set when it has none; a limit above 1 is refused. OrderFair goes
	// back to turns by priority.
	Order *KeyOrder
}

// SetKey configures the concurrency key of a lane (docs/flow-control.md)
// and returns it as it now is. A configured key is kept while it has no
// execution; ForgetKey undoes it. The key need not have executions yet,
// but its lane must have settings or live executions, unless opts has
// NewLane (else a *NotFoundError: a misspelt lane is caught).
//
// The key "" is the lane's executions without a key, which take turns
// with the keys as one more key: it takes a Weight only (cap them with
// SetLaneLimit, rate them with SetLaneRate), and only in a lane that has
// keys (else a *NotFoundError).
func (c *Client) SetKey(ctx context.Context, lane, key string, p KeyParams, opts ...LaneOption) (*Key, error) {
	if err := leases.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	if err := validateKeyParams(key, p); err != nil {
		return nil, err
	}
	ch := store.KeyChange{MaxRunning: p.MaxRunning, Weight: p.Weight}
	if p.Order != nil {
		strict := *p.Order == OrderStrict
		if !strict && *p.Order != OrderFair {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "order", string(*p.Order), "want strict or fair")
		}
		ch.Strict = &strict
	}
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
	if err := c.knownLane(ctx, lane, opts); err != nil {
		return nil, err
	}
	k, err := store.SetKey(ctx, c.pool, lane, key, ch)
	if errors.Is(err, store.ErrKeyNotFound) {
		return nil, &ffdtype.NotFoundError{Object: "key", ID: lane + "/(no key)"}
	}
	if errors.Is(err, store.ErrStrictLimit) {
		v := "none"
		if p.MaxRunning != nil {
			v = strconv.Itoa(*p.MaxRunning)
		}
		return nil, fault.Invalid(ffdtype.KindInvalidValue, "max_running", v, err.Error())
	}
	return k, err
}

// validateKeyParams checks key, and that the key "" (the lane's unkeyed
// executions) is given a weight and nothing else.
func validateKeyParams(key string, p KeyParams) error {
	if key != "" {
		return leases.ValidateKey("key", key)
	}
	if p.MaxRunning != nil || p.Rate != nil || p.Order != nil {
		return fault.Invalid(ffdtype.KindInvalidValue, "key", `""`,
			"the lane's executions without a key take a weight only: cap them with SetLaneLimit, rate them with SetLaneRate")
	}
	if p.Weight == nil {
		return fault.Invalid(ffdtype.KindRequired, "weight", "", `the key "" (the lane's executions without a key) takes a weight`)
	}
	return nil
}

// ForgetKey clears a configured key's limits and weight; once it has no
// live execution the daemon's sweep forgets it. A key that does not
// exist is a *NotFoundError.
func (c *Client) ForgetKey(ctx context.Context, lane, key string) error {
	if err := leases.ValidateName("lane", lane); err != nil {
		return err
	}
	if key != "" { // "": the unkeyed executions' weight back to 1
		if err := leases.ValidateKey("key", key); err != nil {
			return err
		}
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
// stands for the lane's executions without a key; it is listed while the
// lane has such executions pending or running, or a weight was set for
// them.
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
