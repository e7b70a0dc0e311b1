package cascade_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/oracle"
)

// spec submits d with each node's outcome as its kind.
func spec(d *oracle.DAG, lane string) ffdtype.SubmitFlowParams {
	p := ffdtype.SubmitFlowParams{}
	for i := range d.Preds {
		node := ffdtype.SubmitNode{Ref: fmt.Sprint("n", i), Params: ffdtype.CreateParams{Lane: lane, MaxAttempts: 1, Kind: fmt.Sprint(d.Succeeds[i])}}
		if len(d.Preds[i]) > 0 {
			pol := d.Policies[i]
			node.Policy = &pol
		}
		p.Nodes = append(p.Nodes, node)
		for _, pr := range d.Preds[i] {
			p.Edges = append(p.Edges, ffdtype.SubmitEdge{From: fmt.Sprint("n", pr), To: fmt.Sprint("n", i)})
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
				d := oracle.Random(rng, 50+rng.IntN(251), cancelRemaining)
				lane := "rand-" + uuid.NewString()[:8]
				sub, err := flows.Submit(f.Ctx, f.Pool, leases.Limits{}, spec(d, lane))
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
							got, err := leases.Claim(f.Ctx, f.Pool, ffdtype.ClaimParams{Lane: lane, Worker: fmt.Sprintf("w%d/1", w), Max: 1 + wrng.IntN(4)})
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
									_, err = leases.Complete(f.Ctx, f.Pool, leases.Limits{}, x.ID, x.LeaseEpoch, nil)
								} else {
									_, err = leases.Fail(f.Ctx, f.Pool, x.ID, x.LeaseEpoch, ffdtype.FailParams{Error: "planned"})
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
							r, err := f.d.DispatchBatch(f.Ctx, 1+drng.IntN(20), 0)
							if err != nil {
								t.Error(err)
								return
							}
							g, _, err := f.d.CancelSiblings(f.Ctx, 5)
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
					live := f.Count(`SELECT count(*) FROM ff_execution WHERE flow_id = $1 AND state IN ('blocked', 'pending', 'running')`, sub.Flow.ID)
					undispatched := f.Count(`SELECT count(*) FROM ff_completion_event WHERE dispatched_at IS NULL`)
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
				want := d.Expected()
				for i, w := range want {
					x := sub.Executions[fmt.Sprint("n", i)]
					got, err := leases.Get(f.Ctx, f.Pool, x.ID)
					if err != nil {
						t.Fatal(err)
					}
					if got.State != w {
						t.Errorf("n%d (%v over %v): %s, want %s", i, d.Policies[i], d.Preds[i], got.State, w)
					}
				}
			})
		}
	}
}
