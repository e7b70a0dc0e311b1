//go:build linux

package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/store"
)

// The keyed workload (docs/flow-control.md): every keyedEvery-th flow is
// a handful of independent steps on KeyedLane, each under one of a few
// tenants' concurrency keys, in a lane with a rate limit and a key with a
// rate of its own. Ground truth: every keyed flow completes with all its
// steps completed; no sample of the running executions (every
// keySampleEvery, through the faults and the drain) shows a key above
// its limit; and no window of keyedRateWindow holds more first starts
// than the lane's rate and burst allow.
const (
	// KeyedLane is the lane of the keyed workload.
	KeyedLane      = "chaos.keyed"
	keyedEvery     = 4
	keyedKind      = "k.step"
	keySampleEvery = 20 * time.Millisecond
	// The lane's rate: keyedRate starts a second, keyedBurst at once;
	// low enough that the workload (about 8 keyed steps a second) meets
	// it, so claims are held back by it through the faults.
	keyedRate       = 10
	keyedBurst      = 10
	keyedRateWindow = 10 * time.Second
)

// keyLimits are the tenants' running limits; tenant-1 also has a rate,
// tenant1Rate starts a second.
var keyLimits = map[string]int{"tenant-0": 1, "tenant-1": 2, "tenant-2": 2, "tenant-3": 3}

const tenant1Rate = 3

// keyedFlow is one keyed flow the submitter sent.
type keyedFlow struct {
	steps int
	acked bool
}

// setUpKeyed sets the keyed lane's rate and tenant-1's.
func (h *harness) setUpKeyed(ctx context.Context) error {
	client, err := ffd.NewClient(h.pool, nil)
	if err != nil {
		return err
	}
	if _, err := client.SetLaneRate(ctx, KeyedLane, ffd.Rate{Count: keyedRate, Per: time.Second, Burst: keyedBurst}, ffd.NewLane()); err != nil {
		return fmt.Errorf("set the keyed lane's rate: %w", err)
	}
	_, err = client.SetKey(ctx, KeyedLane, "tenant-1", ffd.KeyParams{Rate: &ffd.Rate{Count: tenant1Rate, Per: time.Second}}, ffd.NewLane())
	return err
}

// keyedParams is a keyed flow of n independent steps, their tenants drawn
// from rng.
func keyedParams(id uuid.UUID, n int, rng *rand.Rand) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{ID: id, Kind: "chaos.keyed"}}
	for i := range n {
		key := fmt.Sprint("tenant-", rng.IntN(len(keyLimits)))
		params := nodeParams(keyedKind)
		params.Lane, params.ConcurrencyKey, params.ConcurrencyLimit = KeyedLane, key, keyLimits[key]
		p.Nodes = append(p.Nodes, ffd.SubmitNode{Ref: fmt.Sprint("s", i), Params: params})
	}
	return p
}

// submitKeyed submits one keyed flow of 3 to 10 steps.
func (h *harness) submitKeyed(ctx context.Context, client *ffd.Client, rng *rand.Rand) {
	id := uuid.New()
	k := &keyedFlow{steps: 3 + rng.IntN(8)}
	h.mu.Lock()
	h.keyed[id.String()] = k
	h.mu.Unlock()
	if h.submitFlow(ctx, client, keyedParams(id, k.steps, rng)) {
		h.mu.Lock()
		k.acked = true
		h.mu.Unlock()
	}
}

// sampleKeys reads the keyed lane's running executions by key every
// keySampleEvery, paced by what a read takes, until ctx ends, and records
// a violation for a key above its limit. A sample the faults make fail is
// skipped. The pace matters on a distributed Postgres: the read spans
// every shard, and taken back to back (a ticker's pace, as it was) it used
// 77% of this machine's two cores on an idle cluster of two worker nodes,
// 36% at 50 reads a second, beside the system under test.
func (h *harness) sampleKeys(ctx context.Context) {
	paced(ctx, keySampleEvery, func() {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		running, err := store.RunningByKey(sctx, h.pool, KeyedLane)
		cancel()
		for key, n := range running {
			if n > keyLimits[key] {
				h.violation("key %s had %d running at once; its limit is %d", key, n, keyLimits[key])
			}
		}
		if err == nil {
			h.mu.Lock()
			h.report.KeySamples++
			h.mu.Unlock()
		}
	})
}

// verifyKeyed checks every keyed flow's ground truth and the lane's rate.
func (h *harness) verifyKeyed(ctx context.Context, client *ffd.Client) {
	h.mu.Lock()
	flows := make(map[string]*keyedFlow, len(h.keyed))
	for id, k := range h.keyed {
		flows[id] = k
	}
	h.mu.Unlock()
	for id, k := range flows {
		d := h.outcome(ctx, client, "keyed", id, k.acked)
		if d == nil {
			continue
		}
		h.mu.Lock()
		h.report.KeyedFlows++
		h.mu.Unlock()
		if d.Flow.State != ffd.FlowCompleted || len(d.Members) != k.steps {
			h.violation("keyed flow %s: %s with %d steps; want completed with %d", id, d.Flow.State, len(d.Members), k.steps)
			continue
		}
		for _, x := range d.Members {
			if x.State != ffd.StateCompleted || x.ConcurrencyKey == "" {
				h.violation("keyed flow %s step %s: %s under key %q; want completed under its key", id, x.Step, x.State, x.ConcurrencyKey)
			}
		}
	}
	// First starts only (a retry is a start too, and spends a token): a
	// bound on them is a bound the rate must meet.
	peak := h.checkStarts(ctx, "the keyed lane", "", keyedRate, keyedBurst)
	h.checkStarts(ctx, "key tenant-1", "tenant-1", tenant1Rate, tenant1Rate)
	h.mu.Lock()
	h.report.KeyedPeakStarts = peak
	h.mu.Unlock()
}

// checkStarts records a violation when more first starts of the keyed
// lane (of key, when set) fall within keyedRateWindow than rate a second
// and burst allow; it returns the most it found.
func (h *harness) checkStarts(ctx context.Context, what, key string, rate, burst int) int {
	starts, err := store.FirstStarts(ctx, h.pool, KeyedLane, key)
	if err != nil {
		h.violation("read the starts of %s: %v", what, err)
		return 0
	}
	allowed := rate*int(keyedRateWindow/time.Second) + burst
	peak := 0
	for i, j := 0, 0; j < len(starts); j++ {
		for starts[j].Sub(starts[i]) >= keyedRateWindow {
			i++
		}
		peak = max(peak, j-i+1)
	}
	if peak > allowed {
		h.violation("%s started %d executions within %s; its rate allows %d", what, peak, keyedRateWindow, allowed)
	}
	return peak
}
