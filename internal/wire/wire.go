// Package wire is the stored form of what ffd creates later: a schedule's
// or a trigger's target, a sub-flow step's child, a compensation.
package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
)

// What a schedule stores of its target (ff_schedule.params), a
// trigger of its (ff_trigger.params), a sub-flow step of its child
// (ff_subflow.template) and a flow of its compensations
// (ff_compensation.params) is a persisted format: rows written by one version of ffd are read by the
// next. So it is spelled out here, every field tagged, and versioned,
// instead of being whatever encoding/json makes of the Go structs the
// create path takes (renaming one of their fields would silently drop it
// from every stored row). Migration 00023 rewrote rows stored before the
// format existed. A change to the format is a new version, read beside
// the old one.

// Version is the version of the params format this ffd writes. Version
// 2 added versions, sub-flows, compensations and on-failure steps; it
// reads version 1 rows as they were.
const Version = 2

// Targets: what stored params create.
const (
	TargetExecution = "execution"
	TargetFlow      = "flow"
)

// wireParams is a schedule's stored params: the execution each tick
// creates, or the flow it submits.
type wireParams struct {
	Version   int            `json:"v"`
	Execution *wireExecution `json:"execution,omitempty"`
	Flow      *wireFlow      `json:"flow,omitempty"`
}

// wireExecution is an execution to create, without what the schedule
// sets itself (namespace, idempotency key) and what only flow operations
// set (flow, partition, blocked). Durations are in microseconds.
type wireExecution struct {
	Lane                 string         `json:"lane,omitempty"`
	Kind                 string         `json:"kind,omitempty"`
	Payload              []byte         `json:"payload,omitempty"`
	Priority             int            `json:"priority,omitempty"`
	RequiredCapabilities []string       `json:"required_capabilities,omitempty"`
	MaxAttempts          int            `json:"max_attempts,omitempty"`
	Retry                *wireRetry     `json:"retry,omitempty"`
	LeaseTTLUS           int64          `json:"lease_ttl_us,omitempty"`
	AttemptTimeoutUS     int64          `json:"attempt_timeout_us,omitempty"`
	DeadlineUS           int64          `json:"deadline_us,omitempty"`
	DelayUS              int64          `json:"delay_us,omitempty"`
	Tags                 map[string]any `json:"tags,omitempty"`
	Step                 string         `json:"step,omitempty"`
	UniqueKey            string         `json:"unique_key,omitempty"`
	UniqueWindowUS       int64          `json:"unique_window_us,omitempty"`
	ConcurrencyKey       string         `json:"concurrency_key,omitempty"`
	ConcurrencyLimit     int            `json:"concurrency_limit,omitempty"`
	Version              string         `json:"version,omitempty"`
}

type wireRetry struct {
	BaseUS     int64   `json:"base_us,omitempty"`
	MaxUS      int64   `json:"max_us,omitempty"`
	Multiplier float64 `json:"multiplier,omitempty"`
	Jitter     float64 `json:"jitter,omitempty"`
}

// wireFlow is a flow to submit, without its id and namespace (the
// schedule names each tick's flow).
type wireFlow struct {
	Kind      string         `json:"kind,omitempty"`
	Tags      map[string]any `json:"tags,omitempty"`
	Version   string         `json:"version,omitempty"`
	OnFailure *wireExecution `json:"on_failure,omitempty"`
	Nodes     []wireNode     `json:"nodes"`
	Edges     []wireEdge     `json:"edges,omitempty"`
}

type wireNode struct {
	Ref        string         `json:"ref"`
	Execution  wireExecution  `json:"execution"`
	Policy     *wirePolicy    `json:"policy,omitempty"`
	Flow       *wireFlow      `json:"flow,omitempty"`
	Compensate *wireExecution `json:"compensate,omitempty"`
}

type wirePolicy struct {
	Kind        string `json:"kind"`
	K           int    `json:"k,omitempty"`
	OnSatisfied string `json:"on_satisfied,omitempty"`
}

type wireEdge struct {
	From           string `json:"from"`
	To             string `json:"to"`
	DependencyKind string `json:"dependency_kind,omitempty"`
	DataPassingRef string `json:"data_passing_ref,omitempty"`
}

func us(d time.Duration) int64   { return d.Microseconds() }
func dur(us int64) time.Duration { return time.Duration(us) * time.Microsecond }

func executionToWire(p ffdtype.CreateParams) wireExecution {
	w := wireExecution{
		Lane: p.Lane, Kind: p.Kind, Payload: p.Payload, Priority: p.Priority,
		RequiredCapabilities: p.RequiredCapabilities, MaxAttempts: p.MaxAttempts,
		LeaseTTLUS: us(p.LeaseTTL), AttemptTimeoutUS: us(p.AttemptTimeout), DeadlineUS: us(p.Deadline), DelayUS: us(p.Delay),
		Tags: p.Tags, Step: p.Step, UniqueKey: p.UniqueKey, UniqueWindowUS: us(p.UniqueWindow),
		ConcurrencyKey: p.ConcurrencyKey, ConcurrencyLimit: p.ConcurrencyLimit, Version: p.Version,
	}
	if p.Retry != (ffdtype.RetryPolicy{}) {
		w.Retry = &wireRetry{BaseUS: us(p.Retry.Base), MaxUS: us(p.Retry.Max), Multiplier: p.Retry.Multiplier, Jitter: p.Retry.Jitter}
	}
	return w
}

func (w wireExecution) params() ffdtype.CreateParams {
	p := ffdtype.CreateParams{
		Lane: w.Lane, Kind: w.Kind, Payload: w.Payload, Priority: w.Priority,
		RequiredCapabilities: w.RequiredCapabilities, MaxAttempts: w.MaxAttempts,
		LeaseTTL: dur(w.LeaseTTLUS), AttemptTimeout: dur(w.AttemptTimeoutUS), Deadline: dur(w.DeadlineUS), Delay: dur(w.DelayUS),
		Tags: w.Tags, Step: w.Step, UniqueKey: w.UniqueKey, UniqueWindow: dur(w.UniqueWindowUS),
		ConcurrencyKey: w.ConcurrencyKey, ConcurrencyLimit: w.ConcurrencyLimit, Version: w.Version,
	}
	if w.Retry != nil {
		p.Retry = ffdtype.RetryPolicy{Base: dur(w.Retry.BaseUS), Max: dur(w.Retry.MaxUS), Multiplier: w.Retry.Multiplier, Jitter: w.Retry.Jitter}
	}
	return p
}

// optionalToWire and optionalParams carry an optional execution.
func optionalToWire(p *ffdtype.CreateParams) *wireExecution {
	if p == nil {
		return nil
	}
	w := executionToWire(*p)
	return &w
}

func (w *wireExecution) optionalParams() *ffdtype.CreateParams {
	if w == nil {
		return nil
	}
	p := w.params()
	return &p
}

func flowToWire(p ffdtype.SubmitFlowParams) *wireFlow {
	w := &wireFlow{Kind: p.Flow.Kind, Tags: p.Flow.Tags, Version: p.Flow.Version, OnFailure: optionalToWire(p.Flow.OnFailure),
		Nodes: make([]wireNode, len(p.Nodes))}
	for i, n := range p.Nodes {
		w.Nodes[i] = wireNode{Ref: n.Ref, Execution: executionToWire(n.Params), Compensate: optionalToWire(n.Compensate)}
		if n.Policy != nil {
			w.Nodes[i].Policy = &wirePolicy{Kind: string(n.Policy.Kind), K: n.Policy.K, OnSatisfied: string(n.Policy.OnSatisfied)}
		}
		if n.Flow != nil {
			w.Nodes[i].Flow = flowToWire(*n.Flow)
		}
	}
	for _, e := range p.Edges {
		w.Edges = append(w.Edges, wireEdge{From: e.From, To: e.To, DependencyKind: e.DependencyKind, DataPassingRef: e.DataPassingRef})
	}
	return w
}

func (w *wireFlow) params() ffdtype.SubmitFlowParams {
	p := ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{Kind: w.Kind, Tags: w.Tags, Version: w.Version, OnFailure: w.OnFailure.optionalParams()},
		Nodes: make([]ffdtype.SubmitNode, len(w.Nodes))}
	for i, n := range w.Nodes {
		p.Nodes[i] = ffdtype.SubmitNode{Ref: n.Ref, Params: n.Execution.params(), Compensate: n.Compensate.optionalParams()}
		if n.Policy != nil {
			p.Nodes[i].Policy = &ffdtype.Policy{Kind: ffdtype.PolicyKind(n.Policy.Kind), K: n.Policy.K, OnSatisfied: ffdtype.OnSatisfied(n.Policy.OnSatisfied)}
		}
		if n.Flow != nil {
			child := n.Flow.params()
			p.Nodes[i].Flow = &child
		}
	}
	for _, e := range w.Edges {
		p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: e.From, To: e.To, DependencyKind: e.DependencyKind, DataPassingRef: e.DataPassingRef})
	}
	return p
}

// EncodeExecution and EncodeFlow are the stored params of an execution
// or a flow to create later. A flow's id and namespace are not stored:
// whoever creates it names them.
func EncodeExecution(p ffdtype.CreateParams) (json.RawMessage, error) {
	w := executionToWire(p)
	return json.Marshal(wireParams{Version: Version, Execution: &w})
}

func EncodeFlow(p ffdtype.SubmitFlowParams) (json.RawMessage, error) {
	return json.Marshal(wireParams{Version: Version, Flow: flowToWire(p)})
}

// Decode reads stored params of the given target; a version this ffd
// does not know, or params without the target, is an error naming what
// was found.
func Decode(raw json.RawMessage, target string) (*ffdtype.CreateParams, *ffdtype.SubmitFlowParams, error) {
	var w wireParams
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, nil, fmt.Errorf("decode the stored params: %w", err)
	}
	if w.Version < 1 || w.Version > Version {
		return nil, nil, fmt.Errorf("decode the stored params: format version %d; this ffd reads versions 1 to %d (run the newer ffd)", w.Version, Version)
	}
	switch {
	case target == TargetExecution && w.Execution != nil:
		p := w.Execution.params()
		return &p, nil, nil
	case target == TargetFlow && w.Flow != nil:
		p := w.Flow.params()
		return nil, &p, nil
	}
	return nil, nil, fmt.Errorf("decode the stored params: no %s in them", target)
}
