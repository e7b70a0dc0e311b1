package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// The passes that stand in for lost notifications (the timers' reload,
// the event triggers', the linker's) run at their period on one
// Postgres, and once per sweep pass on a distributed one, where each
// reads every shard. Not parallel: store.RouteAll is process-wide (the
// package's parallel tests start once this one is done).
func TestFallbackEvery(t *testing.T) {
	db := testdb.New(t)
	e := &env{cfg: Config{Pool: db.Pool}}
	for _, tc := range []struct {
		name   string
		routed bool
		want   time.Duration
	}{
		{"one Postgres", false, time.Second},
		{"distributed", true, sweepTurns * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			if got := fallbackEvery(context.Background(), e, time.Second); got != tc.want {
				t.Fatalf("a fallback pass of period 1s runs every %s, want %s", got, tc.want)
			}
		})
	}
}
