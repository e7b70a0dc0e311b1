package ffd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// Upstream is one step this job's step depends on, as it stands when read.
type Upstream struct {
	// Step is the upstream's step name ("" for a member added without one).
	Step string
	// ID is the upstream's execution.
	ID ExecutionID
	// State is its state: completed for the ones that satisfied the join;
	// with any_of, quorum or let_run others may be failed, cancelled or
	// still running.
	State State
	// Result is its result (completed upstreams only). It is JSON as the
	// upstream's handler returned it (HandleBytes results excepted), and
	// typed json.RawMessage so that forwarding it inside a value that is
	// marshalled again (a typed handler's output, a new payload) embeds
	// it as JSON, not as a base64 string. Decode reads it into a value.
	Result json.RawMessage
}

// Decode unmarshals the upstream's JSON result into v.
func (u Upstream) Decode(v any) error {
	if len(u.Result) == 0 {
		return fmt.Errorf("upstream %s (%s) has no result", u.Step, u.ID)
	}
	if err := json.Unmarshal(u.Result, v); err != nil {
		return fmt.Errorf("decode the result of upstream %s (%s) as %T: %w", u.Step, u.ID, v, err)
	}
	return nil
}

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
	us, err := store.UpstreamsOf(ctx, j.client.pool, *j.FlowID, ident.ExecutionID(j.ID))
	if err != nil {
		return nil, err
	}
	out := make([]Upstream, len(us))
	for i, u := range us {
		out[i] = Upstream{Step: u.Step, ID: ExecutionID(u.ID), State: State(u.State), Result: u.Result}
	}
	return out, nil
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
