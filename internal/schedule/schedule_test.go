package schedule_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/flows"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/schedule"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

type fixture struct{ *testdb.Fixture }

func setup(t *testing.T) fixture { return fixture{testdb.Checked(t, 2*time.Minute)} }

func (f fixture) create(p schedule.Params) *store.ScheduleRow {
	f.T.Helper()
	s, err := schedule.Create(f.Ctx, f.Pool, leases.Limits{}, p)
	if err != nil {
		f.T.Fatalf("create schedule %s: %v", p.Name, err)
	}
	return s
}

func (f fixture) fire() schedule.Result {
	f.T.Helper()
	res, err := schedule.Fire(f.Ctx, f.Pool, leases.Limits{}, 50, zap.NewNop())
	if err != nil {
		f.T.Fatal(err)
	}
	return res
}

// dueAgo makes a schedule due `ago` in the past, on its own tick grid.
func (f fixture) dueAgo(name string, ago time.Duration) time.Time {
	f.T.Helper()
	var at time.Time
	if err := f.Pool.QueryRow(f.Ctx, `UPDATE ff_schedule SET next_run_at = date_trunc('second', now() - $2 * interval '1 second')
		WHERE name = $1 RETURNING next_run_at`, name, ago.Seconds()).Scan(&at); err != nil {
		f.T.Fatal(err)
	}
	return at
}

func (f fixture) ticksOf(name string) int {
	keys, err := store.ScheduledExecutions(f.Ctx, f.Pool, "default", schedule.KeyPrefix(name))
	if err != nil {
		f.T.Fatal(err)
	}
	return len(keys)
}

// After an outage of twelve minutes, a five-minute schedule has three
// due ticks (12, 7 and 2 minutes old), none on time: latest fires the
// most recent once, all fires the three, skip fires none.
func TestMissedTicksFollowThePolicy(t *testing.T) {
	t.Parallel()
	f := setup(t)
	want := map[string]int{schedule.MissedLatest: 1, schedule.MissedAll: 3, schedule.MissedSkip: 0}
	for missed := range want {
		f.create(schedule.Params{Name: "m-" + missed, Spec: "@every 5m", Missed: missed,
			Execution: &ffdtype.CreateParams{Lane: "sched-" + missed}})
		f.dueAgo("m-"+missed, 12*time.Minute)
	}
	f.fire()
	for missed, n := range want {
		if got := f.ticksOf("m-" + missed); got != n {
			t.Errorf("%s: fired %d ticks, want %d", missed, got, n)
		}
		s, err := schedule.Get(f.Ctx, f.Pool, "m-"+missed)
		if err != nil || !s.NextRunAt.After(time.Now().Add(-time.Second)) || s.Fired != int64(n) {
			t.Errorf("%s after firing: next %s, fired %d (%v); want the next run ahead and fired = %d", missed, s.NextRunAt, s.Fired, err, n)
		}
	}
}

// A flow schedule submits one flow per tick under an id derived from the
// tick: a tick planned again creates nothing.
func TestFlowTicksAreIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(schedule.Params{Name: "nightly", Spec: "@every 1m", Flow: &ffdtype.SubmitFlowParams{
		Flow:  ffdtype.CreateFlowParams{Kind: "report"},
		Nodes: []ffdtype.SubmitNode{{Ref: "gather", Params: ffdtype.CreateParams{Lane: "reports"}}, {Ref: "send", Params: ffdtype.CreateParams{Lane: "reports"}}},
		Edges: []ffdtype.SubmitEdge{{From: "gather", To: "send"}},
	}})
	tick := f.dueAgo("nightly", 5*time.Second)
	if res := f.fire(); res.Ticks != 1 {
		t.Fatalf("fired %d ticks, want 1", res.Ticks)
	}
	fl, err := flows.Get(f.Ctx, f.Pool, schedule.FlowID("nightly", tick))
	if err != nil || fl.Kind != "report" || fl.NodeCount != 2 || fl.Tags["ffd_schedule"] != "nightly" {
		t.Fatalf("the tick's flow: %+v, %v; want the report flow, tagged with its schedule", fl, err)
	}
	f.Exec(`UPDATE ff_schedule SET next_run_at = $2 WHERE name = $1`, "nightly", tick)
	if res := f.fire(); res.Schedules != 1 || res.Ticks != 0 {
		t.Fatalf("the same tick again: %+v; want the schedule taken and nothing created", res)
	}
	if n := f.Count(`SELECT count(*) FROM ff_flow`); n != 1 {
		t.Fatalf("%d flows, want 1", n)
	}
}

// Create refuses what could never fire or never be created, and a name
// in use; pause stops firing; resume skips what passed; delete removes.
func TestScheduleLifecycle(t *testing.T) {
	t.Parallel()
	f := setup(t)
	bad := []schedule.Params{
		{Name: "x", Spec: "0 0 30 2 *", Execution: &ffdtype.CreateParams{Lane: "l"}},                                                          // February 30th
		{Name: "x", Spec: "@hourly", Execution: &ffdtype.CreateParams{Lane: "bad lane"}},                                                      // invalid execution
		{Name: "x", Spec: "@hourly", Execution: &ffdtype.CreateParams{Lane: "l", IdempotencyKey: "k"}},                                        // keyed by the schedule
		{Name: "x", Spec: "@hourly", Execution: &ffdtype.CreateParams{Lane: "l", Debounce: &ffdtype.Debounce{Key: "k", Window: time.Second}}}, // one a tick
		{Name: "x", Spec: "@hourly"}, // no target
		{Name: "bad name", Spec: "@hourly", Execution: &ffdtype.CreateParams{Lane: "l"}},
		{Name: "x", Spec: "@hourly", Timezone: "Nowhere/City", Execution: &ffdtype.CreateParams{Lane: "l"}},
	}
	for _, p := range bad {
		var ve *ffdtype.ValidationError
		if _, err := schedule.Create(f.Ctx, f.Pool, leases.Limits{}, p); !errors.As(err, &ve) {
			t.Errorf("%+v: %v; want a ValidationError", p, err)
		}
	}
	f.create(schedule.Params{Name: "tick", Spec: "@every 1s", Execution: &ffdtype.CreateParams{Lane: "t"}})
	var ce *ffdtype.ConflictError
	if _, err := schedule.Create(f.Ctx, f.Pool, leases.Limits{}, schedule.Params{Name: "tick", Spec: "@hourly", Execution: &ffdtype.CreateParams{Lane: "t"}}); !errors.As(err, &ce) {
		t.Fatalf("a second schedule named tick: %v; want a conflict", err)
	}
	if _, err := schedule.SetPaused(f.Ctx, f.Pool, "tick", true); err != nil {
		t.Fatal(err)
	}
	f.dueAgo("tick", time.Hour)
	if res := f.fire(); res.Schedules != 0 {
		t.Fatalf("a paused schedule fired: %+v", res)
	}
	s, err := schedule.SetPaused(f.Ctx, f.Pool, "tick", false)
	if err != nil || s.NextRunAt.Before(time.Now().Add(-time.Second)) {
		t.Fatalf("resume: %+v, %v; want it due after now, the paused hour skipped", s, err)
	}
	if err := schedule.Delete(f.Ctx, f.Pool, "tick"); err != nil {
		t.Fatal(err)
	}
	var nf *ffdtype.NotFoundError
	if err := schedule.Delete(f.Ctx, f.Pool, "tick"); !errors.As(err, &nf) {
		t.Fatalf("delete twice: %v; want NotFound", err)
	}
}

// Put is idempotent: the first creates, a repeat writes nothing and
// keeps the next tick, a changed payload replaces the definition but
// keeps the tick and an operator's pause, and a changed spec moves the
// tick. Invalid definitions are refused like Create's.
func TestPutDeclaresASchedule(t *testing.T) {
	t.Parallel()
	f := setup(t)
	put := func(p schedule.Params) (*store.ScheduleRow, bool) {
		t.Helper()
		s, changed, err := schedule.Put(f.Ctx, f.Pool, leases.Limits{}, p)
		if err != nil {
			t.Fatalf("put %s: %v", p.Name, err)
		}
		return s, changed
	}
	p := schedule.Params{Name: "nightly", Spec: "0 3 * * *", Execution: &ffdtype.CreateParams{Lane: "n", Payload: []byte(`{"v":1}`)}}
	first, changed := put(p)
	if !changed {
		t.Fatal("the first put reports no change")
	}
	again, changed := put(p)
	if changed || !again.UpdatedAt.Equal(first.UpdatedAt) || !again.NextRunAt.Equal(first.NextRunAt) {
		t.Fatalf("a repeated put: changed %v, updated %v (was %v); want nothing written", changed, again.UpdatedAt, first.UpdatedAt)
	}
	if _, err := schedule.SetPaused(f.Ctx, f.Pool, "nightly", true); err != nil {
		t.Fatal(err)
	}
	moved := f.dueAgo("nightly", 0) // a tick that no longer matches "0 3 * * *": kept only if the spec is unchanged
	p.Execution = &ffdtype.CreateParams{Lane: "n", Payload: []byte(`{"v":2}`)}
	s, changed := put(p)
	if !changed || !s.Paused || !s.NextRunAt.Equal(moved) || !strings.Contains(string(s.Params), base64.StdEncoding.EncodeToString([]byte(`{"v":2}`))) {
		t.Fatalf("a new payload: changed %v, paused %v, next %v (want %v), params %s", changed, s.Paused, s.NextRunAt, moved, s.Params)
	}
	p.Spec = "0 4 * * *"
	s, changed = put(p)
	if !changed || s.NextRunAt.Equal(moved) || s.NextRunAt.UTC().Hour() != 4 || !s.Paused {
		t.Fatalf("a new spec: changed %v, next %v, paused %v; want the next 04:00, still paused", changed, s.NextRunAt, s.Paused)
	}
	var ve *ffdtype.ValidationError
	if _, _, err := schedule.Put(f.Ctx, f.Pool, leases.Limits{}, schedule.Params{Name: "nightly", Spec: "0 0 30 2 *", Execution: p.Execution}); !errors.As(err, &ve) {
		t.Fatalf("an invalid put: %v; want a ValidationError", err)
	}
	if n := f.Count(`SELECT count(*) FROM ff_schedule`); n != 1 {
		t.Fatalf("%d schedules, want 1", n)
	}
}

// A schedule's payloads were accepted by the client that stored it, whose
// limit may be larger than the firing daemon's (leases.Limits{}: 1 MiB):
// its ticks are created all the same, for an execution and for a flow.
func TestTicksKeepWhatTheirScheduleAccepted(t *testing.T) {
	t.Parallel()
	f := setup(t)
	big := make([]byte, leases.DefaultMaxPayloadBytes+1000)
	lim := leases.Limits{MaxPayloadBytes: 2 * leases.DefaultMaxPayloadBytes}
	if _, err := schedule.Create(f.Ctx, f.Pool, leases.Limits{}, schedule.Params{Name: "small-limit", Spec: "@every 1m",
		Execution: &ffdtype.CreateParams{Lane: "big", Payload: big}}); err == nil {
		t.Fatal("a schedule with a payload over the default limit was stored under the default limit")
	}
	for _, p := range []schedule.Params{
		{Name: "big-execution", Spec: "@every 1m", Execution: &ffdtype.CreateParams{Lane: "big", Payload: big}},
		{Name: "big-flow", Spec: "@every 1m", Flow: &ffdtype.SubmitFlowParams{Nodes: []ffdtype.SubmitNode{{Ref: "a", Params: ffdtype.CreateParams{Lane: "big", Payload: big}}}}},
	} {
		if _, err := schedule.Create(f.Ctx, f.Pool, lim, p); err != nil {
			t.Fatalf("create %s under a 2 MiB limit: %v", p.Name, err)
		}
		f.dueAgo(p.Name, 5*time.Second)
	}
	if res := f.fire(); res.Ticks != 2 {
		t.Fatalf("fired %+v under the default limit, want both ticks", res)
	}
	if n := f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'big' AND length(payload) = $1`, len(big)); n != 2 {
		t.Fatalf("%d executions carry the payload, want 2 (one per schedule)", n)
	}
}
