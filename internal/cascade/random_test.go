package cascade_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
)

// randomDAG is a DAG over nodes n0..n(N-1) whose edges only go from lower
// to higher index, with a policy per joined node and a predetermined
// outcome per node.
type randomDAG struct {
	preds    [][]int
	policies []flows.Policy
	succeeds []bool
}

func newRandomDAG(rng *rand.Rand, n int, cancelRemaining bool) *randomDAG {
	d := &randomDAG{preds: make([][]int, n), policies: make([]flows.Policy, n), succeeds: make([]bool, n)}
	for i := range n {
		d.succeeds[i] = rng.IntN(10) < 8
		if i == 0 {
			continue
		}
		seen := map[int]bool{}
		for range rng.IntN(4) {
			p := rng.IntN(i)
			if !seen[p] {
				seen[p] = true
				d.preds[i] = append(d.preds[i], p)
			}
		}
		if len(d.preds[i]) == 0 {
			continue
		}
		on := flows.LetRun
		if cancelRemaining && rng.IntN(2) == 0 {
			on = flows.CancelRemaining
		}
		switch rng.IntN(3) {
		case 0:
			d.policies[i] = flows.Policy{Kind: flows.AllOf}
		case 1:
			d.policies[i] = flows.Policy{Kind: flows.AnyOf, OnSatisfied: on}
		default:
			d.policies[i] = flows.Policy{Kind: flows.Quorum, K: 1 + rng.IntN(len(d.preds[i])), OnSatisfied: on}
		}
	}
	return d
}

// expected is the final state of every node the policies imply. With
// let_run only it does not depend on the order of completions: each
// group's verdict is a function of its upstreams' final outcomes.
func (d *randomDAG) expected() []leases.State {
	out := make([]leases.State, len(d.preds))
	for i := range out {
		run := true
		if len(d.preds[i]) > 0 {
			var c flows.Counts
			c.Total = len(d.preds[i])
			for _, p := range d.preds[i] {
				switch out[p] {
				case leases.StateCompleted:
					c.Success++
				case leases.StateSkipped:
					c.Skip++
				default:
					c.Fail++
				}
			}
			run = flows.Evaluate(d.policies[i], c) == flows.Satisfied
		}
		switch {
		case !run:
			out[i] = leases.StateSkipped
		case d.succeeds[i]:
			out[i] = leases.StateCompleted
		default:
			out[i] = leases.StateFailed
		}
	}
	return out
}

func (d *randomDAG) spec(lane string) flows.SubmitParams {
	p := flows.SubmitParams{}
	for i := range d.preds {
		node := flows.SubmitNode{Ref: fmt.Sprint("n", i), Params: leases.CreateParams{Lane: lane, MaxAttempts: 1, Kind: fmt.Sprint(d.succeeds[i])}}
		if len(d.preds[i]) > 0 {
			pol := d.policies[i]
			node.Policy = &pol
		}
		p.Nodes = append(p.Nodes, node)
		for _, pr := range d.preds[i] {
			p.Edges = append(p.Edges, flows.SubmitEdge{From: fmt.Sprint("n", pr), To: fmt.Sprint("n", i)})
		}
	}
	return p
}

// Random DAGs completed in random order by 8 workers while two
// dispatchers race: the invariants hold and every node ends as the
// policies imply.
func TestRandomDAGs(t *testing.T) {
	t.Parallel()
	for seed := range uint64(4) {
		for _, cancelRemaining := range []bool{false, true} {
			t.Run(fmt.Sprintf("seed%d/cancel_remaining=%v", seed, cancelRemaining), func(t *testing.T) {
				t.Parallel()
				f := setup(t)
				rng := rand.New(rand.NewPCG(seed, 42))
				d := newRandomDAG(rng, 50+rng.IntN(251), cancelRemaining)
				lane := "rand-" + uuid.NewString()[:8]
				sub, err := flows.Submit(f.ctx, f.pool, leases.Limits{}, d.spec(lane))
				if err != nil {
					t.Fatal(err)
				}
				done := make(chan struct{})
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						wrng := rand.New(rand.NewPCG(seed, uint64(w)))
						for {
							select {
							case <-done:
								return
							default:
							}
							got, err := leases.Claim(f.ctx, f.pool, leases.ClaimParams{Lane: lane, Worker: fmt.Sprintf("w%d/1", w), Max: 1 + wrng.IntN(4)})
							if err != nil {
								t.Error(err)
								return
							}
							if len(got) == 0 {
								time.Sleep(time.Millisecond)
								continue
							}
							wrng.Shuffle(len(got), func(i, j int) { got[i], got[j] = got[j], got[i] })
							for _, x := range got {
								if x.Kind == "true" {
									_, err = leases.Complete(f.ctx, f.pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil)
								} else {
									_, err = leases.Fail(f.ctx, f.pool, x.ID, x.LeaseEpoch, leases.FailParams{Error: "planned"})
								}
								// A sibling cancelled under us is fenced: that is
								// the point, not a failure of the test.
								if err != nil && !cancelRemaining {
									t.Error(err)
									return
								}
							}
						}
					}()
				}
				for i := range 2 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						drng := rand.New(rand.NewPCG(seed, 100+uint64(i)))
						for {
							select {
							case <-done:
								return
							default:
							}
							r, err := f.d.DispatchBatch(f.ctx, 1+drng.IntN(20), 0)
							if err != nil {
								t.Error(err)
								return
							}
							g, _, err := f.d.CancelSiblings(f.ctx, 5)
							if err != nil {
								t.Error(err)
								return
							}
							if r.Events == 0 && g == 0 {
								time.Sleep(time.Millisecond)
							}
						}
					}()
				}
				deadline := time.Now().Add(3 * time.Minute)
				for {
					live := f.count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state IN ('blocked', 'pending', 'running')`, sub.Flow.ID)
					undispatched := f.count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`)
					if live == 0 && undispatched == 0 || time.Now().After(deadline) || t.Failed() {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				close(done)
				wg.Wait()
				f.drain()
				f.quiescent()
				if cancelRemaining {
					return // cancellation races make the end state order-dependent; the invariants cover it
				}
				want := d.expected()
				for i, w := range want {
					x := sub.Executions[fmt.Sprint("n", i)]
					got, err := leases.Get(f.ctx, f.pool, x.ID)
					if err != nil {
						t.Fatal(err)
					}
					if got.State != w {
						t.Errorf("n%d (%v over %v): %s, want %s", i, d.policies[i], d.preds[i], got.State, w)
					}
				}
			})
		}
	}
}
