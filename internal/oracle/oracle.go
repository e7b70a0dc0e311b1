// Package oracle generates random DAGs with join policies and computes the
// final state of every node that the policies imply, so that tests can
// check what the engine did against ground truth rather than against
// itself. The cascade's random test and the fault suite both use it.
package oracle

import (
	"math/rand/v2"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
)

// DAG is a DAG over nodes 0..N-1 whose edges only go from a lower to a
// higher index, with a join policy per node that has upstreams and a
// predetermined outcome per node (what its handler will do if it runs).
type DAG struct {
	// Preds lists each node's upstreams.
	Preds [][]int
	// Policies joins each node's upstreams; zero for a root.
	Policies []ffdtype.Policy
	// Succeeds says whether the node's handler succeeds when it runs.
	Succeeds []bool
}

// Random draws a DAG of n nodes: each node has up to three upstreams among
// the earlier ones, a random all_of/any_of/quorum policy, and succeeds
// with probability 0.8. With cancelRemaining, half the any_of and quorum
// groups cancel their losing siblings.
func Random(rng *rand.Rand, n int, cancelRemaining bool) *DAG {
	d := &DAG{Preds: make([][]int, n), Policies: make([]ffdtype.Policy, n), Succeeds: make([]bool, n)}
	for i := range n {
		d.Succeeds[i] = rng.IntN(10) < 8
		if i == 0 {
			continue
		}
		seen := map[int]bool{}
		for range rng.IntN(4) {
			p := rng.IntN(i)
			if !seen[p] {
				seen[p] = true
				d.Preds[i] = append(d.Preds[i], p)
			}
		}
		if len(d.Preds[i]) == 0 {
			continue
		}
		on := ffdtype.LetRun
		if cancelRemaining && rng.IntN(2) == 0 {
			on = ffdtype.CancelRemaining
		}
		switch rng.IntN(3) {
		case 0:
			d.Policies[i] = ffdtype.Policy{Kind: ffdtype.AllOf}
		case 1:
			d.Policies[i] = ffdtype.Policy{Kind: ffdtype.AnyOf, OnSatisfied: on}
		default:
			d.Policies[i] = ffdtype.Policy{Kind: ffdtype.Quorum, K: 1 + rng.IntN(len(d.Preds[i])), OnSatisfied: on}
		}
	}
	return d
}

// Deterministic reports whether Expected is the only correct end state:
// true unless some group cancels its remaining siblings, whose end then
// depends on which upstream finished first.
func (d *DAG) Deterministic() bool {
	for _, p := range d.Policies {
		if p.OnSatisfied == ffdtype.CancelRemaining {
			return false
		}
	}
	return true
}

// Expected is the final state of every node the policies imply. With
// let_run only it does not depend on the order of completions: each
// group's verdict is a function of its upstreams' final outcomes.
func (d *DAG) Expected() []ffdtype.State {
	out := make([]ffdtype.State, len(d.Preds))
	for i := range out {
		run := true
		if len(d.Preds[i]) > 0 {
			var c ffdtype.Counts
			c.Total = len(d.Preds[i])
			for _, p := range d.Preds[i] {
				switch out[p] {
				case ffdtype.StateCompleted:
					c.Success++
				case ffdtype.StateSkipped:
					c.Skip++
				default:
					c.Fail++
				}
			}
			run = flows.Evaluate(d.Policies[i], c) == ffdtype.DecisionSatisfied
		}
		switch {
		case !run:
			out[i] = ffdtype.StateSkipped
		case d.Succeeds[i]:
			out[i] = ffdtype.StateCompleted
		default:
			out[i] = ffdtype.StateFailed
		}
	}
	return out
}
