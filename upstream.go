package ffd

import (
	"context"
	"errors"
	"fmt"

	"github.com/flowfabric/ffd/internal/store"
)

// ErrNotAFlowMember is returned by the upstream reads of a job outside
// any flow.
var ErrNotAFlowMember = errors.New("the execution is not a flow member")

// Upstreams reads every upstream of the job's step (the edges into it),
// by step name, in one query.
func (j *Job) Upstreams(ctx context.Context) ([]Upstream, error) {
	if j.FlowID == nil {
		return nil, fmt.Errorf("upstreams of %s: %w", j.ID, ErrNotAFlowMember)
	}
	if j.client == nil {
		return nil, errors.New("ffd: Upstreams needs a Job handed to a handler by a Worker")
	}
	return store.UpstreamsOf(ctx, j.client.pool, *j.FlowID, j.ID)
}

// UpstreamResults decodes the JSON results of the job's completed
// upstreams into T, by step name, in one query: what a join step reads
// to combine its parents' outputs. Upstreams that did not complete (the
// losers of an any_of, a quorum's stragglers) are left out.
func UpstreamResults[T any](ctx context.Context, job *Job) (map[string]T, error) {
	us, err := job.Upstreams(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]T, len(us))
	for _, u := range us {
		if u.State != StateCompleted {
			continue
		}
		var v T
		if len(u.Result) > 0 {
			if err := u.Decode(&v); err != nil {
				return nil, err
			}
		}
		out[u.Step] = v
	}
	return out, nil
}
