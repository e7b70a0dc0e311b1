package console

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// Geometry of a drawn flow, in SVG units.
const (
	nodeW, nodeH = 170, 50
	colGap       = 70
	rowGap       = 16
	laneH        = 14 // the slot a passing edge takes in a column
	margin       = 16
	sweeps       = 12 // ordering passes (alternately down and up)
	// maxPassing bounds the lanes long edges take through columns: a
	// flow whose long edges would need more draws them straight across
	// instead (they may then cross boxes), so that laying out a huge
	// flow stays cheap.
	maxPassing = 20000
)

// gnode is one step as drawn.
type gnode struct {
	ID, Name, Kind, State string
	Status                string // the state in words, with a duration when there is one
	Join                  string // the group's policy and decision, "" for a root
	Error                 string // the last error, for a failed step's tooltip
	Spawned               string // the step that added it at run time; "" for a step submitted
	Waiting               bool   // a wait of its own (a sleep, a signal) holds it back
	Subflow               bool   // a sub-flow step: its body is a flow
	Child                 string // the sub-flow step's child flow, once started
	X, Y                  int
}

// gedge is one edge as drawn: a path from the right of its upstream to
// the left of its downstream, through the slots it took in the columns
// it crosses, ending in an arrowhead.
type gedge struct {
	D              string // the SVG path
	State, Outcome string
	Spawn          bool   // not an edge: the tie of a step to the step that spawned it
	From, To       string // step names, for the tooltip and tests
}

// graph is a flow laid out in layers (Sugiyama's method): a step's
// column is its longest distance from a root, so every edge points
// right; an edge that skips columns takes a slot of its own in each
// column it crosses, so it never passes through a step's box; and each
// column is ordered by the mean position of its neighbours, sweeping
// down and up and keeping the order with the fewest crossings.
type graph struct {
	Nodes         []*gnode
	Edges         []gedge
	Width, Height int
	Crossings     int  // edge crossings left by the ordering
	Straight      bool // too many long edges: drawn straight, not routed around steps
}

// slot is one place in a column: a step, or a piece of an edge passing
// through.
type slot struct {
	node       *gnode // nil for a passing edge
	name       string // a tie-break that keeps the order stable
	layer      int
	pos        int     // index in its column
	bary       float64 // the ordering key of the current sweep
	up, down   []*slot
	y, h       int // top and height once placed
	centreY    int
	passingFor int // the edge index a passing slot belongs to
}

func layout(members []*ffdtype.Execution, edges []*ffdtype.Edge, groups []ffdtype.EdgeGroup, notes map[uuid.UUID]store.MemberNote, now time.Time) *graph {
	g := &graph{}
	byID := g.addNodes(members, groups, notes, now)
	live := links(byID, edges, notes)
	assignLayers(byID, live)
	cols, chains := g.columns(byID, live)
	order(cols)
	g.Crossings = crossings(cols)
	g.place(cols)
	for i, l := range live {
		g.Edges = append(g.Edges, gedge{D: edgePath(chains[i]), State: l.state, Outcome: l.outcome, Spawn: l.spawn,
			From: chains[i][0].node.Name, To: chains[i][len(chains[i])-1].node.Name})
	}
	return g
}

// link is what joins two steps in the drawing: an edge of the flow, or
// the tie of a step added at run time to the step that spawned it (which
// has no edge, and would otherwise sit in the first column, left of its
// spawner and tied to nothing).
type link struct {
	up, down       ffdtype.ExecutionID
	state, outcome string
	spawn          bool
}

// addNodes makes a node of each member, with its join and what it waits
// for, and returns their slots by id.
func (g *graph) addNodes(members []*ffdtype.Execution, groups []ffdtype.EdgeGroup, notes map[uuid.UUID]store.MemberNote, now time.Time) map[ffdtype.ExecutionID]*slot {
	byID := make(map[ffdtype.ExecutionID]*slot, len(members))
	names := make(map[uuid.UUID]string, len(members))
	for _, x := range members {
		names[x.ID.UUID] = stepName(x)
	}
	for _, x := range members {
		name := names[x.ID.UUID]
		note := notes[x.ID.UUID]
		n := &gnode{ID: x.ID.String(), Name: name, Kind: x.Kind, State: string(x.State), Status: statusWith(x, note, now),
			Error: x.LastError, Waiting: note.Waiting}
		if note.SpawnedBy != nil {
			n.Spawned = names[*note.SpawnedBy]
		}
		n.Subflow = x.Lane == store.SubflowLane
		if note.Child != nil {
			n.Child = note.Child.String()
		}
		byID[x.ID] = &slot{node: n, name: name + "\x00" + n.ID}
		g.Nodes = append(g.Nodes, n)
	}
	for _, gr := range groups {
		if s := byID[gr.Downstream]; s != nil {
			s.node.Join = policyLabel(gr.Policy) + " · " + string(gr.Decision)
		}
	}
	return byID
}

// links are the flow's edges between drawn steps, then a spawn link
// from each spawner to each step it added.
func links(byID map[ffdtype.ExecutionID]*slot, edges []*ffdtype.Edge, notes map[uuid.UUID]store.MemberNote) []link {
	var out []link
	for _, e := range edges {
		if byID[e.Upstream] != nil && byID[e.Downstream] != nil {
			out = append(out, link{up: e.Upstream, down: e.Downstream, state: string(e.State), outcome: string(e.ResolvedOutcome)})
		}
	}
	var spawned []link
	for id := range byID {
		note := notes[id.UUID]
		if note.SpawnedBy == nil {
			continue
		}
		up := ffdtype.ExecutionID{Partition: id.Partition, UUID: *note.SpawnedBy} // one flow, one partition
		if byID[up] != nil {
			spawned = append(spawned, link{up: up, down: id, state: "spawn", spawn: true})
		}
	}
	slices.SortFunc(spawned, func(a, b link) int { return strings.Compare(byID[a.down].name, byID[b.down].name) })
	return append(out, spawned...)
}

// columns puts each slot in its layer's column, with a passing slot in
// every column a link skips, and returns the columns and each link's
// slots, upstream first.
func (g *graph) columns(byID map[ffdtype.ExecutionID]*slot, live []link) ([][]*slot, [][]*slot) {
	passing := 0
	for _, l := range live {
		passing += byID[l.down].layer - byID[l.up].layer - 1
	}
	g.Straight = passing > maxPassing
	var cols [][]*slot
	put := func(s *slot) {
		for len(cols) <= s.layer {
			cols = append(cols, nil)
		}
		cols[s.layer] = append(cols[s.layer], s)
	}
	for _, s := range byID {
		put(s)
	}
	chains := make([][]*slot, len(live))
	for i, l := range live {
		u, d := byID[l.up], byID[l.down]
		chain := []*slot{u}
		prev := u
		for layer := u.layer + 1; layer < d.layer && !g.Straight; layer++ {
			p := &slot{layer: layer, name: fmt.Sprintf("%s\x01%d", u.name, i), passingFor: i}
			put(p)
			prev.down = append(prev.down, p)
			p.up = append(p.up, prev)
			chain = append(chain, p)
			prev = p
		}
		prev.down = append(prev.down, d)
		d.up = append(d.up, prev)
		chains[i] = append(chain, d)
	}
	return cols, chains
}

// place sets each slot's place: columns left to right, slots top to
// bottom, each column centred on the tallest; and the drawing's size.
func (g *graph) place(cols [][]*slot) {
	heights := make([]int, len(cols))
	tallest := 0
	for l, col := range cols {
		for i, s := range col {
			s.h = laneH
			if s.node != nil {
				s.h = nodeH
			}
			if i > 0 {
				heights[l] += rowGap
			}
			heights[l] += s.h
		}
		tallest = max(tallest, heights[l])
	}
	for l, col := range cols {
		y := margin + (tallest-heights[l])/2
		for _, s := range col {
			s.y, s.centreY = y, y+s.h/2
			if s.node != nil {
				s.node.X, s.node.Y = colX(l), y
			}
			y += s.h + rowGap
		}
	}
	g.Width = colX(len(cols)-1) + nodeW + margin
	g.Height = tallest + 2*margin
	if len(cols) == 0 {
		g.Width, g.Height = 2*margin, 2*margin
	}
}

// How many characters of each line fit a node's box (nodeW less its
// padding, at each line's font size); a longer line ends in "…" and the
// box's tooltip has it whole.
const (
	nameChars   = 21
	statusChars = 24
	joinChars   = 27
)

// fitLabel is s cut to at most n characters, the last one "…" when cut.
func fitLabel(n int, s string) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return strings.TrimRight(string(r[:n-1]), " ·") + "…"
}

func colX(layer int) int { return margin + layer*(nodeW+colGap) }

// edgePath draws an edge through its slots: a curve across each gap
// between columns (its control points stay inside the gap, so the curve
// does too) and a straight line across each column it passes.
func edgePath(chain []*slot) string {
	var b strings.Builder
	u := chain[0]
	x, y := colX(u.layer)+nodeW, u.centreY
	fmt.Fprintf(&b, "M%d %d", x, y)
	for _, s := range chain[1:] {
		x2 := colX(s.layer)
		mid := (x + x2) / 2
		if s.layer-u.layer > 1 && len(chain) == 2 {
			// Drawn straight (graph.Straight): the curve spans columns.
			mid = x + colGap/2
		}
		fmt.Fprintf(&b, " C%d %d, %d %d, %d %d", mid, y, mid, s.centreY, x2, s.centreY)
		x, y = x2, s.centreY
		if s.node == nil {
			x += nodeW
			fmt.Fprintf(&b, " L%d %d", x, y)
		}
	}
	return b.String()
}

// assignLayers sets each slot's layer to its longest distance from a
// root (Kahn's order; a flow is acyclic).
func assignLayers(byID map[ffdtype.ExecutionID]*slot, live []link) {
	indeg := map[ffdtype.ExecutionID]int{}
	out := map[ffdtype.ExecutionID][]ffdtype.ExecutionID{}
	for _, l := range live {
		indeg[l.down]++
		out[l.up] = append(out[l.up], l.down)
	}
	var queue []ffdtype.ExecutionID
	for id := range byID {
		if indeg[id] == 0 {
			queue = append(queue, id)
		}
	}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, d := range out[id] {
			byID[d].layer = max(byID[d].layer, byID[id].layer+1)
			if indeg[d]--; indeg[d] == 0 {
				queue = append(queue, d)
			}
		}
	}
}

// order sorts each column to reduce crossings: names first, then sweeps
// by barycentre (down from the upstream column, up from the downstream
// one), keeping the best order seen.
func order(cols [][]*slot) {
	for _, col := range cols {
		slices.SortFunc(col, func(a, b *slot) int { return strings.Compare(a.name, b.name) })
		renumber(col)
	}
	best, bestN := snapshot(cols), crossings(cols)
	for pass := 0; pass < sweeps && bestN > 0; pass++ {
		if pass%2 == 0 {
			for l := 1; l < len(cols); l++ {
				sortBy(cols[l], func(s *slot) []*slot { return s.up })
			}
		} else {
			for l := len(cols) - 2; l >= 0; l-- {
				sortBy(cols[l], func(s *slot) []*slot { return s.down })
			}
		}
		if n := crossings(cols); n < bestN {
			best, bestN = snapshot(cols), n
		}
	}
	for l := range cols {
		cols[l] = best[l]
		renumber(cols[l])
	}
}

// sortBy orders a column by the mean position of each slot's neighbours
// in the adjacent column; a slot without any keeps its place.
func sortBy(col []*slot, neighbours func(*slot) []*slot) {
	for _, s := range col {
		ns := neighbours(s)
		if len(ns) == 0 {
			s.bary = float64(s.pos)
			continue
		}
		sum := 0
		for _, n := range ns {
			sum += n.pos
		}
		s.bary = float64(sum) / float64(len(ns))
	}
	slices.SortStableFunc(col, func(a, b *slot) int {
		if c := cmp.Compare(a.bary, b.bary); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	renumber(col)
}

func renumber(col []*slot) {
	for i, s := range col {
		s.pos = i
	}
}

func snapshot(cols [][]*slot) [][]*slot {
	out := make([][]*slot, len(cols))
	for l, col := range cols {
		out[l] = slices.Clone(col)
	}
	return out
}

// crossings counts the pairs of edge pieces that cross between adjacent
// columns: the inversions of the downstream positions once the pieces
// are sorted by upstream position (a Fenwick tree, O(E log V)).
func crossings(cols [][]*slot) int {
	total := 0
	for l := 0; l+1 < len(cols); l++ {
		type piece struct{ a, b int }
		var ps []piece
		for _, s := range cols[l] {
			for _, d := range s.down {
				ps = append(ps, piece{s.pos, d.pos})
			}
		}
		slices.SortFunc(ps, func(x, y piece) int {
			if c := cmp.Compare(x.a, y.a); c != 0 {
				return c
			}
			return cmp.Compare(x.b, y.b)
		})
		tree := make([]int, len(cols[l+1])+1)
		seen := 0
		for _, p := range ps {
			// Pieces seen so far with a downstream position after p's cross it.
			atMost := 0
			for i := p.b + 1; i > 0; i -= i & -i {
				atMost += tree[i]
			}
			total += seen - atMost
			for i := p.b + 1; i < len(tree); i += i & -i {
				tree[i]++
			}
			seen++
		}
	}
	return total
}

// stepName is how a step is named in the graph: its step name, or the
// head of its id.
func stepName(x *ffdtype.Execution) string {
	if x.Step == "" {
		return x.ID.UUID.String()[:8]
	}
	return x.Step
}

// statusWith is status, or what a waiting step waits for.
func statusWith(x *ffdtype.Execution, note store.MemberNote, now time.Time) string {
	if !note.Waiting {
		return status(x, now)
	}
	return waitLabel(note.WaitFor, note.Signal, note.Until)
}

// waitLabel says what a wait waits for, briefly.
func waitLabel(waitFor, signal string, until *time.Time) string {
	s := "sleeps"
	if waitFor == store.WaitSignal {
		s = "waits for " + signal
	}
	if until != nil {
		s += " · until " + until.UTC().Format("15:04:05")
	}
	return s
}

// status is a step's state in words, with how long it ran (or has been
// running).
func status(x *ffdtype.Execution, now time.Time) string {
	s := string(x.State)
	switch {
	case x.StartedAt != nil && x.TerminalAt != nil:
		s += " · " + duration(x.TerminalAt.Sub(*x.StartedAt))
	case x.StartedAt != nil && x.State == ffdtype.StateRunning:
		s += " · " + duration(now.Sub(*x.StartedAt))
	}
	if x.Attempt > 1 {
		s += fmt.Sprintf(" · try %d", x.Attempt)
	}
	return s
}

// duration is d for a person: milliseconds under a second, then seconds
// with two decimals, then minutes and hours rounded to the second.
func duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0 ms"
	case d < time.Second:
		return fmt.Sprintf("%d ms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return d.Round(time.Second).String()
}

func policyLabel(p ffdtype.Policy) string {
	switch p.Kind {
	case ffdtype.Quorum:
		return "quorum " + itoa(p.K)
	case ffdtype.AnyOf:
		return "any_of"
	}
	return string(p.Kind)
}
