package schedule

import (
	"testing"
	"time"
)

func mustParse(t *testing.T, spec, tz string) *Spec {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, tz, err)
	}
	return s
}

// The policies on a one-second schedule reached on time, a few seconds
// late (within grace: every tick fires under every policy), minutes late
// and a day late, and on an hourly one hours late.
func TestPlan(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	every := mustParse(t, "@every 1s", "")
	hourly := mustParse(t, "0 * * * *", "")
	for _, c := range []struct {
		name      string
		spec      *Spec
		next      time.Time
		missed    string
		fire      int
		lastFired time.Time
		after     time.Time
	}{
		{"on time, latest", every, now, MissedLatest, 1, now, now.Add(time.Second)},
		{"on time, skip", every, now, MissedSkip, 1, now, now.Add(time.Second)},
		{"not due yet", every, now.Add(time.Second), MissedAll, 0, time.Time{}, now.Add(time.Second)},
		{"10 s late, latest (within grace: every tick on time)", every, now.Add(-10 * time.Second), MissedLatest, 11, now, now.Add(time.Second)},
		{"a 3 s outage, latest: every tick fires", every, now.Add(-3 * time.Second), MissedLatest, 4, now, now.Add(time.Second)},
		{"2 min late every second, latest: the minute on time", every, now.Add(-2 * time.Minute), MissedLatest, 61, now, now.Add(time.Second)},
		{"2 min late every second, skip: the minute on time", every, now.Add(-2 * time.Minute), MissedSkip, 61, now, now.Add(time.Second)},
		{"10 s late, all", every, now.Add(-10 * time.Second), MissedAll, 11, now, now.Add(time.Second)},
		{"10 s late, skip (still within grace)", every, now.Add(-10 * time.Second), MissedSkip, 11, now, now.Add(time.Second)},
		{"3 h late hourly, skip", hourly, now.Add(-3 * time.Hour), MissedSkip, 1, now, now.Add(time.Hour)},
		{"3 h late hourly, latest", hourly, now.Add(-3 * time.Hour), MissedLatest, 1, now, now.Add(time.Hour)},
		{"3 h late hourly, all", hourly, now.Add(-3 * time.Hour), MissedAll, 4, now, now.Add(time.Hour)},
		{"a day late every second, all: the last 100", every, now.Add(-24 * time.Hour), MissedAll, MaxCatchUp, time.Time{}, now.Add(time.Second)},
	} {
		fire, after := c.spec.Plan(c.next, now, c.missed)

		if len(fire) != c.fire || !after.Equal(c.after) {
			t.Errorf("%s: fired %d, next %s; want %d, next %s", c.name, len(fire), after, c.fire, c.after)
			continue
		}
		if !c.lastFired.IsZero() && !fire[len(fire)-1].Equal(c.lastFired) {
			t.Errorf("%s: last fired tick %s, want %s", c.name, fire[len(fire)-1], c.lastFired)
		}
	}
}

// Reached half an hour after its last tick, an hourly schedule three
// hours behind has nothing on time: skip fires nothing.
func TestPlanSkipsWhatIsLate(t *testing.T) {
	t.Parallel()
	hourly := mustParse(t, "0 * * * *", "")
	now := time.Date(2026, 11, 22, 12, 30, 0, 0, time.UTC)
	fire, after := hourly.Plan(now.Add(-3*time.Hour-30*time.Minute), now, MissedSkip)
	if len(fire) != 0 || !after.Equal(now.Add(30*time.Minute)) {
		t.Fatalf("fired %v, next %s; want nothing, next 13:00", fire, after)
	}
}

// A spec is read in its time zone: nine in Paris is eight UTC in winter
// and seven in summer.
func TestTimeZones(t *testing.T) {
	t.Parallel()
	paris := mustParse(t, "0 9 * * *", "Europe/Paris")
	for _, c := range []struct{ from, want time.Time }{
		{time.Date(2026, 1, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 10, 8, 0, 0, 0, time.UTC)},
		{time.Date(2026, 7, 10, 0, 0, 0, 0, time.UTC), time.Date(2026, 7, 10, 7, 0, 0, 0, time.UTC)},
	} {
		if got := paris.Next(c.from); !got.Equal(c.want) {
			t.Errorf("Next(%s) = %s, want %s", c.from, got.UTC(), c.want)
		}
	}
}

func TestParseRefusesNonsense(t *testing.T) {
	t.Parallel()
	for _, c := range [][2]string{{"61 * * * *", ""}, {"not cron", ""}, {"* * * * *", "Mars/Olympus"}, {"", ""}} {
		if _, err := Parse(c[0], c[1]); err == nil {
			t.Errorf("Parse(%q, %q) accepted it", c[0], c[1])
		}
	}
	if _, err := ValidMissed("sometimes"); err == nil {
		t.Error("ValidMissed accepted an unknown policy")
	}
}

// Parse and Plan never panic; Plan never fires a tick after now or
// returns a next tick at or before now, and under every policy fires each
// tick due within Grace of now (the most recent MaxCatchUp).
func FuzzParsePlan(f *testing.F) {
	for _, s := range []string{"@every 1s", "0 9 * * 1-5", "*/15 * * * *", "0 0 1 1 *", "30 * * * * *", "@hourly", "@every 0s"} {
		f.Add(s, "UTC", int64(3600))
	}
	f.Fuzz(func(t *testing.T, spec, tz string, lateSeconds int64) {
		s, err := Parse(spec, tz)
		if err != nil {
			return
		}
		now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
		next := now.Add(-time.Duration(lateSeconds%(7*86400)) * time.Second)
		for _, m := range []string{MissedLatest, MissedSkip, MissedAll} {
			fire, after := s.Plan(next, now, m)
			for _, tick := range fire {
				if tick.After(now) {
					t.Fatalf("%q %s: fired %s, after now %s", spec, m, tick, now)
				}
			}
			if !after.IsZero() && !after.After(now) {
				t.Fatalf("%q %s: next tick %s not after now %s", spec, m, after, now)
			}
			fired := map[time.Time]bool{}
			for _, tick := range fire {
				fired[tick] = true
			}
			onTime := 0
			for tick, n := next, 0; !tick.IsZero() && !tick.After(now) && n < 2*maxScan; tick, n = s.Next(tick), n+1 {
				if now.Sub(tick) > Grace {
					continue
				}
				onTime++
				if !fired[tick] && len(fire) < MaxCatchUp {
					t.Fatalf("%q %s: tick %s, on time at %s, did not fire (fired %d)", spec, m, tick, now, len(fire))
				}
			}
		}
	})
}
