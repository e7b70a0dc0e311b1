package daemon

import (
	"slices"
	"testing"
)

// On a distributed Postgres each sweep step that reads every shard runs
// once per pass of sweepTurns sweeps; on one Postgres, and in a full
// sweep, every step runs every time.
func TestSweepTurns(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		spread, full bool
		want         int // runs of each step over a pass
	}{
		{"one Postgres", false, false, sweepTurns},
		{"distributed", true, false, 1},
		{"distributed, full", true, true, sweepTurns},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for _, step := range sweepSteps {
				runs := 0
				for turn := range sweepTurns {
					if sweepRuns(step, turn, tc.spread, tc.full) {
						runs++
					}
				}
				if runs != tc.want {
					t.Errorf("%s: %d runs in a pass of %d sweeps, want %d", step, runs, sweepTurns, tc.want)
				}
			}
		})
	}
	for step := range stepTurn {
		if !slices.Contains(sweepSteps, step) {
			t.Errorf("stepTurn names %q, which is no sweep step", step)
		}
	}
	for _, step := range sweepSteps {
		if _, ok := stepTurn[step]; !ok {
			t.Errorf("sweep step %q has no turn", step)
		}
	}
}
