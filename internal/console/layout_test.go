package console

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/store"
)

// dag builds members and edges from step names and "up>down" pairs.
func dag(steps []string, pairs [][2]string) ([]*ffdtype.Execution, []*ffdtype.Edge) {
	ids := map[string]ffdtype.ExecutionID{}
	var xs []*ffdtype.Execution
	for _, s := range steps {
		id := ident.NewExecutionIDIn(0)
		ids[s] = id
		xs = append(xs, &ffdtype.Execution{ID: id, Step: s, State: ffdtype.StatePending})
	}
	var es []*ffdtype.Edge
	for _, p := range pairs {
		es = append(es, &ffdtype.Edge{Upstream: ids[p[0]], Downstream: ids[p[1]], State: ffdtype.EdgeState("pending")})
	}
	return xs, es
}

// Ordered by name, a → d and b → c cross; ordering by the upstreams'
// positions puts d above c and removes the crossing.
func TestLayoutOrdersColumnsToAvoidCrossings(t *testing.T) {
	t.Parallel()
	xs, es := dag([]string{"a", "b", "c", "d"}, [][2]string{{"a", "d"}, {"b", "c"}})
	g := layout(xs, es, nil, nil, time.Now())
	if g.Crossings != 0 {
		t.Fatalf("%d crossings, want 0", g.Crossings)
	}
	y := map[string]int{}
	for _, n := range g.Nodes {
		y[n.Name] = n.Y
	}
	if y["d"] >= y["c"] {
		t.Fatalf("d at y=%d, c at y=%d; want d above c, beside its upstream a", y["d"], y["c"])
	}
}

// For random DAGs: no two boxes of a column overlap, every edge leaves
// its upstream's right side and reaches its downstream's left side, and
// where an edge passes a column it runs at a height no box of that
// column covers (so it never crosses a step's box).
func TestLayoutKeepsEdgesOutOfBoxes(t *testing.T) {
	t.Parallel()
	for seed := range uint64(200) {
		r := rand.New(rand.NewPCG(seed, 7))
		n := 2 + r.IntN(40)
		steps := make([]string, n)
		for i := range steps {
			steps[i] = fmt.Sprintf("s%02d", i)
		}
		var pairs [][2]string
		for d := 1; d < n; d++ {
			for range r.IntN(4) {
				pairs = append(pairs, [2]string{steps[r.IntN(d)], steps[d]})
			}
		}
		pairs = dedupe(pairs)
		xs, es := dag(steps, pairs)
		g := layout(xs, es, nil, nil, time.Now())

		byCol := map[int][]*gnode{}
		for _, nd := range g.Nodes {
			byCol[nd.X] = append(byCol[nd.X], nd)
		}
		for x, col := range byCol {
			for i, a := range col {
				for _, b := range col[i+1:] {
					if a.Y < b.Y+nodeH && b.Y < a.Y+nodeH {
						t.Fatalf("seed %d: boxes %s and %s overlap in column x=%d", seed, a.Name, b.Name, x)
					}
				}
			}
		}
		for _, e := range g.Edges {
			for _, seg := range straightSegments(t, e.D) {
				// A straight piece runs across a column at height y.
				for _, nd := range byCol[seg.x1] {
					if seg.y > nd.Y && seg.y < nd.Y+nodeH {
						t.Fatalf("seed %d: edge %s → %s crosses %s's box at y=%d", seed, e.From, e.To, nd.Name, seg.y)
					}
				}
			}
		}
		if g.Width <= 0 || g.Height <= 0 {
			t.Fatalf("seed %d: size %dx%d", seed, g.Width, g.Height)
		}
	}
}

func dedupe(pairs [][2]string) [][2]string {
	seen := map[[2]string]bool{}
	var out [][2]string
	for _, p := range pairs {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

type segment struct{ x1, x2, y int }

var (
	pathCommand = regexp.MustCompile(`([MLC])([^MLC]*)`)
	pathNumber  = regexp.MustCompile(`-?\d+`)
)

// straightSegments reads the "L" pieces of a path drawn by edgePath,
// checking that its curves stay in the gaps between columns.
func straightSegments(t *testing.T, d string) []segment {
	t.Helper()
	var x, y int
	var out []segment
	for _, m := range pathCommand.FindAllStringSubmatch(d, -1) {
		var v []int
		for _, s := range pathNumber.FindAllString(m[2], -1) {
			n, _ := strconv.Atoi(s)
			v = append(v, n)
		}
		switch {
		case m[1] == "M" && len(v) == 2:
			x, y = v[0], v[1]
		case m[1] == "L" && len(v) == 2:
			if v[1] != y {
				t.Fatalf("path %q: a straight piece that is not level", d)
			}
			out = append(out, segment{x, v[0], y})
			x = v[0]
		case m[1] == "C" && len(v) == 6:
			if v[0] < x || v[2] > v[4] || v[4]-x != colGap {
				t.Fatalf("path %q: a curve leaves the gap between columns", d)
			}
			x, y = v[4], v[5]
		default:
			t.Fatalf("path %q: unexpected %q", d, m[0])
		}
	}
	return out
}

func TestDuration(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		-time.Second:                       "0 ms",
		1500 * time.Microsecond:            "1 ms",
		999 * time.Millisecond:             "999 ms",
		1234 * time.Millisecond:            "1.23 s",
		90 * time.Second:                   "1m30s",
		2*time.Hour + 500*time.Millisecond: "2h0m1s",
	} {
		if got := duration(d); got != want {
			t.Errorf("duration(%v) = %q, want %q", d, got, want)
		}
	}
}

// A flow whose long edges would need more than maxPassing lanes is drawn
// with straight long edges, and says so; a smaller one is routed.
func TestLayoutFallsBackToStraightEdgesWhenHuge(t *testing.T) {
	t.Parallel()
	chain := func(n int) *graph {
		steps := []string{"c0000"}
		var pairs [][2]string
		for i := 1; i < n; i++ {
			steps = append(steps, fmt.Sprintf("c%04d", i))
			pairs = append(pairs, [2]string{steps[i-1], steps[i]}, [2]string{"c0000", steps[i]})
		}
		xs, es := dag(steps, pairs)
		return layout(xs, es, nil, nil, time.Now())
	}
	if g := chain(150); g.Straight {
		t.Fatalf("a 150-step chain fed by its root (%d lanes) is drawn straight; want routed", 149*148/2)
	}
	if g := chain(1000); !g.Straight {
		t.Fatalf("a 1,000-step chain fed by its root (%d lanes) is routed; want straight", 999*998/2)
	}
}

// A step added at run time sits right of the step that spawned it, tied
// to it by a spawn link (it has no edge; it sat in the first column, left
// of its spawner and tied to nothing), and the step its join waits in
// moves right of it.
func TestLayoutPutsSpawnedStepsRightOfTheirSpawner(t *testing.T) {
	t.Parallel()
	xs, es := dag([]string{"fan", "child1", "child2", "join"}, [][2]string{{"fan", "join"}, {"child1", "join"}, {"child2", "join"}})
	byName := map[string]*ffdtype.Execution{}
	for _, x := range xs {
		byName[x.Step] = x
	}
	spawner := byName["fan"].ID.UUID
	notes := map[uuid.UUID]store.MemberNote{byName["child1"].ID.UUID: {SpawnedBy: &spawner}, byName["child2"].ID.UUID: {SpawnedBy: &spawner}}
	g := layout(xs, es, nil, notes, time.Now())
	x := map[string]int{}
	for _, n := range g.Nodes {
		x[n.Name] = n.X
	}
	for _, child := range []string{"child1", "child2"} {
		if x[child] <= x["fan"] {
			t.Errorf("%s at x=%d, not right of its spawner at x=%d", child, x[child], x["fan"])
		}
		if x["join"] <= x[child] {
			t.Errorf("join at x=%d, not right of %s at x=%d", x["join"], child, x[child])
		}
	}
	spawns := 0
	for _, e := range g.Edges {
		if e.Spawn {
			spawns++
			if e.From != "fan" || (e.To != "child1" && e.To != "child2") {
				t.Errorf("spawn link %s → %s, want fan → a child", e.From, e.To)
			}
		}
	}
	if spawns != 2 {
		t.Fatalf("%d spawn links, want 2", spawns)
	}
}

// Each line of a node fits its box: a longer one is cut with "…" (the
// tooltip has it whole).
func TestLabelsFitTheirBox(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n    int
		in   string
		want string
	}{
		{statusChars, "waits for approved · until 05:53:29", "waits for approved · un…"},
		{statusChars, "pending", "pending"},
		{nameChars, "a-step-name-far-too-long-for-its-box", "a-step-name-far-too-…"},
		{joinChars, "quorum 2 · pending", "quorum 2 · pending"},
		{statusChars, "sleeps · until 05:53:29 and more", "sleeps · until 05:53:29…"},
	} {
		got := fitLabel(tc.n, tc.in)
		if got != tc.want || len([]rune(got)) > tc.n {
			t.Errorf("fitLabel(%d, %q) = %q, want %q (at most %d characters)", tc.n, tc.in, got, tc.want, tc.n)
		}
	}
}
