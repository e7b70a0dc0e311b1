package bench_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/bench"
	"github.com/flowfabric/ffd/internal/testdb"
)

// fakePeer writes a peer program that records its arguments and prints
// the given JSON, so that the comparison's plumbing can be checked
// without building River.
func fakePeer(t *testing.T, out string) (path, argsLog string) {
	t.Helper()
	dir := t.TempDir()
	path, argsLog = filepath.Join(dir, "peer"), filepath.Join(dir, "args")
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %s\necho '%s'\n", argsLog, out)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, argsLog
}

func TestCompare(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db := testdb.New(t)
	env := bench.NewEnv(db.Pool, db.URL, nil)
	var made []string
	env.NewDatabase = func(context.Context) (*pgxpool.Pool, string, func(), error) {
		other := testdb.New(t)
		made = append(made, other.URL)
		return other.Pool, other.URL, func() {}, nil
	}
	peer, argsLog := fakePeer(t, `{"peer": "fake", "executions_per_second": 50, "db_us_per_execution": 1000}`)
	c, err := bench.Compare(ctx, env, "throughput", bench.Params{Executions: 200, Workers: 10, Rounds: 2}, peer)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Points) != 1 || len(c.Points[0].FFD) != 2 || len(c.Points[0].Peer) != 2 {
		t.Fatalf("want one point with two rounds of each side, got %+v", c.Points)
	}
	p := c.Points[0]
	s := p.Summary
	if s["peer_executions_per_second"] != 50 || s["ffd_executions_per_second"] <= 0 {
		t.Fatalf("summary %v: want the peer's 50/s and a measured ffd rate", s)
	}
	want := (p.FFD[0]["executions_per_second"]/50 + p.FFD[1]["executions_per_second"]/50) / 2
	if got := s["ratio_executions_per_second"]; got < want*0.999 || got > want*1.001 {
		t.Fatalf("ratio %v, want the median of the per-round ratios %v", got, want)
	}
	// The floor ran as a third side, and the summary has its ratios.
	if len(p.Floor) != 2 {
		t.Fatalf("%d floor runs, want one per round", len(p.Floor))
	}
	wantFloor := (p.FFD[0]["executions_per_second"]/p.Floor[0]["executions_per_second"] +
		p.FFD[1]["executions_per_second"]/p.Floor[1]["executions_per_second"]) / 2
	if got := s["ffd_over_floor_executions_per_second"]; got < wantFloor*0.999 || got > wantFloor*1.001 {
		t.Fatalf("ffd/floor %v, want the median of the per-round ratios %v (summary %v)", got, wantFloor, s)
	}
	wantPeer := (50/p.Floor[0]["executions_per_second"] + 50/p.Floor[1]["executions_per_second"]) / 2
	if got := s["peer_over_floor_executions_per_second"]; got < wantPeer*0.999 || got > wantPeer*1.001 {
		t.Fatalf("peer/floor %v, want %v (summary %v)", got, wantPeer, s)
	}
	if s["floor_executions_per_second"] <= 0 {
		t.Fatalf("summary %v: want the floor's median rate", s)
	}
	// Six fresh databases (one per side and round), the peer given the
	// URL of its own each time, with the point's sizes.
	args, err := os.ReadFile(argsLog)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(args)), "\n")
	if len(made) != 6 || len(lines) != 2 {
		t.Fatalf("%d databases and %d peer runs, want 6 and 2", len(made), len(lines))
	}
	for _, l := range lines {
		if !strings.Contains(l, "--mode work --executions 200 --workers 10") {
			t.Errorf("peer run %q: want the point's mode and sizes", l)
		}
		var peerDB string
		for _, u := range made {
			if strings.Contains(l, u) {
				peerDB = u
			}
		}
		if peerDB == "" {
			t.Errorf("peer run %q: want the URL of a fresh database", l)
		}
	}
}

func TestCompareRefuses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testdb.New(t)
	env := bench.NewEnv(db.Pool, db.URL, nil)
	env.NewDatabase = func(context.Context) (*pgxpool.Pool, string, func(), error) {
		other := testdb.New(t)
		return other.Pool, other.URL, func() {}, nil
	}
	silent, _ := fakePeer(t, `{"peer": "fake"}`)
	if _, err := bench.Compare(ctx, env, "enqueue", bench.Params{Executions: 100, Rounds: 1}, silent); err == nil || !strings.Contains(err.Error(), "reported no executions_per_second") {
		t.Errorf("a peer without the figure: %v, want an error naming it", err)
	}
	if _, err := bench.Compare(ctx, env, "chain", bench.Params{Rounds: 1}, silent); err == nil || !strings.Contains(err.Error(), "no peer equivalent") {
		t.Errorf("a scenario without a peer: %v, want refused", err)
	}
	env.NewDatabase = nil
	if _, err := bench.Compare(ctx, env, "throughput", bench.Params{Rounds: 1}, silent); err == nil {
		t.Error("a comparison without fresh databases: want refused")
	}
}
