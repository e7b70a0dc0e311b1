package ffd

import (
	"testing"
	"time"
)

// DaemonConfig's retentions: 0 is the default, KeepForever (any
// negative age) keeps forever, which internal/daemon spells 0.
func TestRetentionZeroIsTheDefaultAndKeepForeverKeeps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		age, want time.Duration
	}{
		{0, DefaultExecutionRetention},
		{KeepForever, 0},
		{-time.Hour, 0},
		{48 * time.Hour, 48 * time.Hour},
	} {
		if got := keepOrDefault(c.age, DefaultExecutionRetention); got != c.want {
			t.Errorf("keepOrDefault(%v) = %v, want %v", c.age, got, c.want)
		}
	}
}
