package ffd_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
)

func (f *fixture) inState(lane string, state ffd.State) int {
	return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = $1 AND state = $2`, lane, state)
}

// A paused lane is claimed from by no worker while running executions
// finish; resumed, its work runs.
func TestPauseLane(t *testing.T) {
	t.Parallel()
	f := setup(t)
	release := make(chan struct{})
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"paused"}, Concurrency: 4, PollInterval: 50 * time.Millisecond,
		Handler: func(ctx context.Context, j *ffd.Job) ([]byte, error) {
			if j.Kind == "hold" {
				<-release
			}
			return nil, nil
		}})
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "paused", Kind: "hold"}); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the held execution to run", func() bool { return f.inState("paused", ffd.StateRunning) == 1 })
	if l, err := f.client.PauseLane(f.Ctx, "paused"); err != nil || !l.Paused {
		t.Fatalf("PauseLane: %+v %v", l, err)
	}
	if _, err := f.client.CreateMany(f.Ctx, inOneLane("paused", 5)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // twenty poll intervals, and notifications
	if n := f.inState("paused", ffd.StatePending); n != 5 {
		t.Fatalf("%d of 5 executions still pending in a paused lane; want all", n)
	}
	close(release)
	f.WaitFor("the running execution to finish while paused", func() bool { return f.inState("paused", ffd.StateCompleted) == 1 })
	lanes, err := f.client.ListLanes(f.Ctx)
	if err != nil || len(lanes) != 1 || lanes[0].Name != "paused" || !lanes[0].Paused {
		t.Fatalf("ListLanes: %+v %v; want the paused lane", lanes, err)
	}
	if _, err := f.client.ResumeLane(f.Ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	f.WaitFor("the lane's work to run after resuming", func() bool { return f.inState("paused", ffd.StateCompleted) == 6 })
	if lanes, _ := f.client.ListLanes(f.Ctx); len(lanes) != 0 {
		t.Fatalf("a resumed, uncapped lane is still listed: %+v", lanes)
	}
}

// A capped lane never runs more than its cap, however many workers with
// free slots claim from it.
func TestLaneLimit(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.SetLaneLimit(f.Ctx, "capped", 3, ffd.NewLane()); err != nil {
		t.Fatal(err)
	}
	var running, peak atomic.Int32
	var mu sync.Mutex
	handler := func(ctx context.Context, j *ffd.Job) ([]byte, error) {
		n := running.Add(1)
		mu.Lock()
		if n > peak.Load() {
			peak.Store(n)
		}
		mu.Unlock()
		time.Sleep(30 * time.Millisecond)
		running.Add(-1)
		return nil, nil
	}
	for range 3 {
		f.startWorker(ffd.WorkerConfig{Lanes: []string{"capped"}, Concurrency: 10, PollInterval: 20 * time.Millisecond, Handler: handler})
	}
	if _, err := f.client.CreateMany(f.Ctx, inOneLane("capped", 60)); err != nil {
		t.Fatal(err)
	}
	dbPeak := 0
	f.WaitFor("every execution to complete", func() bool {
		dbPeak = max(dbPeak, f.inState("capped", ffd.StateRunning))
		return f.inState("capped", ffd.StateCompleted) == 60
	})
	if p := peak.Load(); p > 3 || p < 2 || dbPeak > 3 {
		t.Fatalf("peak concurrency %d in handlers, %d seen in the database; want at most the cap of 3 (and the cap used)", p, dbPeak)
	}
	if _, err := f.client.SetLaneLimit(f.Ctx, "capped", -1); err == nil {
		t.Fatal("a negative cap was accepted")
	}
}
