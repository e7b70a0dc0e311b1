package flows

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// One spawn is one transaction with its spawner's completion; these
// bound it (a map over 10,000 items with a join: 10,001 nodes and
// 10,000 edges).
const (
	MaxSpawnNodes = 10001
	MaxSpawnEdges = 20000
)

// spawnPlan is a validated spawn: the new nodes' indexes and in-degrees,
// and the existing steps its edges go into with how many each.
type spawnPlan struct {
	index    map[string]int
	indeg    []int
	into     map[string]int // existing step → edges into it
	intoRefs []string       // its keys, sorted
}

// planSpawn validates a spawn's shape, touching no database: sizes,
// refs, edge ends, self and duplicate edges, cycles among the new nodes,
// policies. An edge may not start at an existing step: the new nodes
// come after the spawner, which completes with them, and nothing
// existing may come before them (so no cycle can pass through the
// flow's existing steps).
func planSpawn(p ffdtype.SpawnParams) (*spawnPlan, error) {
	if len(p.Nodes) == 0 || len(p.Nodes) > MaxSpawnNodes {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "nodes", fmt.Sprint(len(p.Nodes)), fmt.Sprintf("want 1..%d new steps", MaxSpawnNodes))
	}
	if len(p.Edges) > MaxSpawnEdges {
		return nil, fault.Invalid(ffdtype.KindOutOfRange, "edges", fmt.Sprint(len(p.Edges)), fmt.Sprintf("want at most %d edges", MaxSpawnEdges))
	}
	index, err := indexRefs(p.Nodes)
	if err != nil {
		return nil, err
	}
	pl := &spawnPlan{index: index, indeg: make([]int, len(p.Nodes)), into: map[string]int{}}
	out := make([][]int, len(p.Nodes))
	pairs := make(map[[2]string]bool, len(p.Edges))
	for _, e := range p.Edges {
		from, ok := pl.index[e.From]
		if !ok {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges.from", e.From,
				"an edge of a spawn starts at a new step; the spawner completes with the spawn, so new steps without incoming edges start at once")
		}
		if e.From == e.To {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges", e.From+" -> "+e.To, "an edge cannot join a node to itself")
		}
		if pairs[[2]string{e.From, e.To}] {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges", e.From+" -> "+e.To, "duplicate edge")
		}
		pairs[[2]string{e.From, e.To}] = true
		if to, ok := pl.index[e.To]; ok {
			pl.indeg[to]++
			out[from] = append(out[from], to)
			continue
		}
		if e.To == "" || len(e.To) > leases.MaxNameLength {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "edges.to", e.To, "want a new node's ref or an existing step's name")
		}
		pl.into[e.To]++
	}
	if ref := cycleRef(p.Nodes, pl.indeg, out); ref != "" {
		return nil, fault.Invalid(ffdtype.KindCycle, "edges", ref, "the edges form a cycle through this node")
	}
	for i, n := range p.Nodes {
		if n.Policy != nil && pl.indeg[i] == 0 {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.policy", n.Ref, "a node without incoming edges has no join policy")
		}
		if n.Params.IdempotencyKey != "" {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "idempotency_key", n.Params.IdempotencyKey, "node "+n.Ref+": a spawn is as idempotent as its spawner's completion")
		}
		if n.Params.Step != "" && n.Params.Step != n.Ref {
			return nil, fault.Invalid(ffdtype.KindInvalidValue, "nodes.params.step", n.Params.Step, "node "+n.Ref+": a node's step is its ref; leave step empty")
		}
	}
	for ref := range pl.into {
		pl.intoRefs = append(pl.intoRefs, ref)
	}
	slices.Sort(pl.intoRefs)
	return pl, nil
}

// ValidateSpawn checks a spawn's shape as CompleteAndSpawn will, without
// a database: for a handler to learn of a bad spawn when it makes it.
func ValidateSpawn(p ffdtype.SpawnParams) error {
	_, err := planSpawn(p)
	return err
}

// CompleteAndSpawn completes the running flow member id, fenced on epoch,
// and adds p's steps and edges to its flow, in one transaction: all of
// it or nothing. A lost lease adds nothing (ErrLeaseLost); so does an
// edge into a step that has started or whose join is decided, a step
// name the flow already has (ConflictError), or a finished flow.
//
// Locks, in the global order: the joins of the existing steps the new
// edges go into, the spawner, the flow; then the new rows are written
// and the spawner completed (store.Terminate, which finds its rows
// locked already). The new members are written before the completion,
// so the flow, which finishes when its last live member ends, stays
// open for them.
func CompleteAndSpawn(ctx context.Context, db store.DB, lim leases.Limits, id ffdtype.ExecutionID, epoch int64, result []byte,
	p ffdtype.SpawnParams) (*ffdtype.Ending, *ffdtype.Spawned, error) {
	if err := leases.ValidateCompletion(lim, id, epoch, result); err != nil {
		return nil, nil, err
	}
	pl, err := planSpawn(p)
	if err != nil {
		return nil, nil, err
	}
	if result == nil {
		result = []byte{}
	}
	var sp *spawn
	err = store.InTx(ctx, db, func(tx pgx.Tx) error {
		sp = &spawn{tx: tx, locks: store.NewLocks(tx), lim: lim, id: id, epoch: epoch, result: result, p: p, pl: pl}
		return sp.run(ctx)
	})
	if sp != nil && sp.lost {
		// Nothing was written. Say why: the lease moved on (or this very
		// completion already took effect, which repeats nothing here).
		return nil, nil, leases.ExplainLost(ctx, db, id, epoch)
	}
	if err != nil {
		return nil, nil, wrapOp("complete "+id.String()+" with a spawn", err)
	}
	return sp.ending, sp.spawned, nil
}

// spawn is one try of CompleteAndSpawn's transaction.
type spawn struct {
	tx     pgx.Tx
	locks  *store.Locks
	lim    leases.Limits
	id     ffdtype.ExecutionID
	epoch  int64
	result []byte
	p      ffdtype.SpawnParams
	pl     *spawnPlan

	flowID   uuid.UUID
	flow     *ffdtype.Flow
	existing map[string]store.StepMember // the steps new edges go into, by name
	intoIDs  []uuid.UUID                 // their ids, in key order
	adds     []int32                     // how many edges each gains
	xs       []*ffdtype.Execution        // the new steps, in p.Nodes' order

	lost    bool // the spawner's lease is no longer held: roll back
	ending  *ffdtype.Ending
	spawned *ffdtype.Spawned
}

// run takes the locks in the global order (the joins the new edges go
// into, the spawner, the flow), checks what they guard, writes the new
// steps and joins, and completes the spawner.
func (s *spawn) run(ctx context.Context) error {
	x, err := store.GetExecution(ctx, s.tx, s.id)
	if errors.Is(err, pgx.ErrNoRows) {
		return &ffdtype.NotFoundError{Object: "execution", ID: s.id.String()}
	}
	if err != nil {
		return err
	}
	if x.FlowID == nil {
		return fault.Invalid(ffdtype.KindNotMember, "execution_id", s.id.String(), "only a flow member can spawn steps into its flow")
	}
	s.flowID = *x.FlowID
	if err := s.lockTargets(ctx); err != nil {
		return err
	}
	m, err := s.locks.Execution(ctx, s.id)
	if err != nil {
		return err
	}
	if m.State != ffdtype.StateRunning {
		s.lost = true
		return errLost
	}
	if s.flow, err = lockOpenFlow(ctx, s.locks, s.flowID, store.ForUpdate); err != nil {
		return err
	}
	if err := s.checkUnderLocks(ctx); err != nil {
		return err
	}
	if err := s.insertSteps(ctx); err != nil {
		return err
	}
	if err := s.insertJoins(ctx); err != nil {
		return err
	}
	return s.complete(ctx)
}

// lockTargets locks the joins of the existing steps the new edges go
// into, in key order, and checks that each is undecided.
func (s *spawn) lockTargets(ctx context.Context) error {
	s.existing = map[string]store.StepMember{}
	if len(s.pl.intoRefs) == 0 {
		return nil
	}
	var err error
	if s.existing, err = store.MembersByStep(ctx, s.tx, s.flowID, s.pl.intoRefs); err != nil {
		return err
	}
	byID := map[uuid.UUID]string{}
	for _, ref := range s.pl.intoRefs {
		m, ok := s.existing[ref]
		if !ok {
			return fault.Invalid(ffdtype.KindInvalidValue, "edges.to", ref, "no new node has this ref and the flow has no step of this name")
		}
		s.intoIDs = append(s.intoIDs, m.ID.UUID)
		byID[m.ID.UUID] = ref
	}
	slices.SortFunc(s.intoIDs, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
	s.adds = make([]int32, len(s.intoIDs))
	for i, down := range s.intoIDs {
		ref := byID[down]
		g, _, err := s.locks.Group(ctx, s.flowID, ffdtype.ExecutionID{Partition: s.id.Partition, UUID: down}, nil)
		if errors.Is(err, pgx.ErrNoRows) {
			return fault.Invalid(ffdtype.KindInvalidValue, "edges.to", ref, "step "+ref+" has no upstreams: it has started or can start, so it cannot wait for new steps")
		}
		if err != nil {
			return err
		}
		if g.Decision != ffdtype.DecisionPending {
			return fault.Invalid(ffdtype.KindInvalidValue, "edges.to", ref, "the join of step "+ref+" is already "+string(g.Decision))
		}
		s.adds[i] = int32(s.pl.into[ref])
	}
	return nil
}

// checkUnderLocks: a step whose join the group lock did not cover could
// have moved on; and a new step may take a name the flow has. One read
// under the locks answers both: the targets' states, and the new names
// already taken (refused by name here; the step index refuses one taken
// since).
func (s *spawn) checkUnderLocks(ctx context.Context) error {
	refs := make([]string, len(s.p.Nodes), len(s.p.Nodes)+len(s.pl.intoRefs))
	for i, n := range s.p.Nodes {
		refs[i] = n.Ref
	}
	now, err := store.MembersByStep(ctx, s.tx, s.flowID, append(refs, s.pl.intoRefs...))
	if err != nil {
		return err
	}
	for _, ref := range s.pl.intoRefs {
		if st := now[ref].State; st != ffdtype.StateBlocked {
			return fault.Invalid(ffdtype.KindInvalidValue, "edges.to", ref, "step "+ref+" is "+string(st)+"; only a blocked step can wait for new steps")
		}
	}
	for _, ref := range refs {
		if _, ok := now[ref]; ok {
			return &ffdtype.ConflictError{Object: "step", ID: ref, Reason: "flow " + s.flowID.String() + " already has a step of this name"}
		}
	}
	return nil
}

// insertSteps writes the new steps, each recorded as spawned by the
// spawner.
func (s *spawn) insertSteps(ctx context.Context) error {
	part := ident.Partition(s.flowID)
	params := make([]leases.Normalized, len(s.p.Nodes))
	for i, n := range s.p.Nodes {
		cp := n.Params
		if cp.Namespace == "" {
			cp.Namespace = s.flow.Namespace
		}
		cp.Step = n.Ref
		if err := memberVersion(&cp, s.flow.Version, n.Ref); err != nil {
			return err
		}
		if n.Flow != nil {
			if err := subflowStep(&cp, n.Ref); err != nil {
				return err
			}
		}
		var err error
		if params[i], err = leases.Normalize(cp, leases.Placement{FlowID: &s.flowID, Partition: &part, Blocked: s.pl.indeg[i] > 0, Subflow: n.Flow != nil}, s.lim); err != nil {
			return refine(err, n.Ref)
		}
	}
	// The new steps' sub-flows and compensations, checked as a
	// submission's are.
	ex, err := planExtras(ffdtype.SubmitFlowParams{Flow: ffdtype.CreateFlowParams{ID: s.flowID, Namespace: s.flow.Namespace, Version: s.flow.Version}, Nodes: s.p.Nodes}, s.lim, 0, nil)
	if err != nil {
		return err
	}
	xs, err := leases.InsertMany(ctx, s.tx, params)
	if store.IsStepTaken(err) {
		return &ffdtype.ConflictError{Object: "step", Reason: "flow " + s.flowID.String() + " took one of the new steps' names meanwhile"}
	}
	if err != nil {
		return err
	}
	s.xs = xs
	ids := make([]ffdtype.ExecutionID, len(xs))
	byRef := make(map[string]*ffdtype.Execution, len(xs))
	for i, x := range xs {
		ids[i], byRef[s.p.Nodes[i].Ref] = x.ID, x
	}
	if err := ex.writeSpawned(ctx, s.tx, s.flow, byRef); err != nil {
		return err
	}
	return store.MarkSpawned(ctx, s.tx, s.flowID, s.id, ids)
}

// insertJoins writes the new steps' joins and the new edges, widens the
// joins they go into, and grows the flow's counts.
func (s *spawn) insertJoins(ctx context.Context) error {
	var groups []store.NewGroup
	for i, n := range s.p.Nodes {
		if s.pl.indeg[i] == 0 {
			continue
		}
		pol := ffdtype.Policy{Kind: ffdtype.AllOf}
		if n.Policy != nil {
			pol = *n.Policy
		}
		if err := NormalizePolicy(&pol); err != nil {
			return refine(err, n.Ref)
		}
		if pol.Kind == ffdtype.Quorum && pol.K > s.pl.indeg[i] {
			return fault.Invalid(ffdtype.KindOutOfRange, "k", fmt.Sprint(pol.K), fmt.Sprintf("node %s has %d incoming edges; a quorum of %d can never be met", n.Ref, s.pl.indeg[i], pol.K))
		}
		groups = append(groups, store.NewGroup{Downstream: s.xs[i].ID, Policy: pol, Total: s.pl.indeg[i]})
	}
	edges := make([]store.NewEdge, len(s.p.Edges))
	for i, e := range s.p.Edges {
		down := s.existing[e.To].ID
		if to, ok := s.pl.index[e.To]; ok {
			down = s.xs[to].ID
		}
		edges[i] = store.NewEdge{ID: ident.NewUUID(), Upstream: s.xs[s.pl.index[e.From]].ID, Downstream: down,
			DependencyKind: e.DependencyKind, DataPassingRef: e.DataPassingRef}
		if edges[i].DependencyKind == "" {
			edges[i].DependencyKind = DefaultDependencyKind
		}
	}
	if len(edges) > 0 {
		if err := store.InsertAppliedEdges(ctx, s.tx, s.flowID, edges); err != nil {
			return fmt.Errorf("insert edges: %w", err)
		}
	}
	if err := store.InsertGroups(ctx, s.tx, s.flowID, groups); err != nil {
		return fmt.Errorf("insert edge groups: %w", err)
	}
	if len(s.intoIDs) > 0 {
		if err := store.WidenGroups(ctx, s.tx, s.flowID, s.intoIDs, s.adds); err != nil {
			return err
		}
	}
	return store.GrowFlow(ctx, s.tx, s.flowID, len(s.xs), len(edges))
}

// complete completes the spawner, fenced: a lost lease rolls all of the
// spawn back.
func (s *spawn) complete(ctx context.Context) error {
	ended, err := store.Terminate(ctx, s.tx, []store.Termination{{ID: s.id, Epoch: s.epoch, State: ffdtype.StateCompleted, Result: s.result}})
	if err != nil {
		return err
	}
	if len(ended) != 1 {
		s.lost = true
		return errLost
	}
	s.ending = &ffdtype.Ending{State: ffdtype.StateCompleted, Attempt: ended[0].Attempt, Result: s.result, EventID: ended[0].EventID}
	s.spawned = &ffdtype.Spawned{Executions: make(map[string]*ffdtype.Execution, len(s.xs))}
	for i, x := range s.xs {
		s.spawned.Executions[s.p.Nodes[i].Ref] = x
	}
	return nil
}

// errLost rolls a spawn back when its spawner's lease is no longer held.
var errLost = errors.New("lease lost")
