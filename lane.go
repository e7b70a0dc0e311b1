package ffd

import (
	"context"
	"strconv"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// MaxLaneLimit bounds SetLaneLimit.
const MaxLaneLimit = 1_000_000

// PauseLane stops every worker from claiming in lane, at once (the claim
// statement itself checks); running executions finish.
func (c *Client) PauseLane(ctx context.Context, lane string) (*Lane, error) {
	paused := true
	return c.setLane(ctx, lane, &paused, nil)
}

// ResumeLane lets workers claim in lane again, and wakes them.
func (c *Client) ResumeLane(ctx context.Context, lane string) (*Lane, error) {
	paused := false
	return c.setLane(ctx, lane, &paused, nil)
}

// SetLaneLimit caps lane's running executions at maxRunning across every
// worker (0 removes the cap). Claims in a capped lane are counted one
// after another, so the cap holds however many workers claim at once.
func (c *Client) SetLaneLimit(ctx context.Context, lane string, maxRunning int) (*Lane, error) {
	if maxRunning < 0 || maxRunning > MaxLaneLimit {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "max_running", strconv.Itoa(maxRunning), "want 0 (no cap) up to "+strconv.Itoa(MaxLaneLimit))
	}
	return c.setLane(ctx, lane, nil, &maxRunning)
}

func (c *Client) setLane(ctx context.Context, lane string, paused *bool, max *int) (*Lane, error) {
	if err := leases.ValidateName("lane", lane); err != nil {
		return nil, err
	}
	return store.SetLane(ctx, c.pool, lane, paused, max)
}

// ListLanes lists the lanes that are paused or capped; every other lane
// is neither.
func (c *Client) ListLanes(ctx context.Context) ([]*Lane, error) {
	return store.ListLanes(ctx, c.pool)
}
