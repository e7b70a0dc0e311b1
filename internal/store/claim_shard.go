package store

import (
	"context"
	"sync"

	"github.com/flowfabric/ffd/ffdtype"
)

// Shard-affine claims, on a distributed Postgres.
//
// A claim that reads and locks rows on every shard commits in two phases
// across the nodes it wrote, and a read across every shard costs the
// coordinator a task per shard: on a cluster the claim was most of an
// execution's cost. So a claim in its own transaction takes its work
// shard by shard, each shard's claim a statement of its own (one shard,
// one round trip, committed on the node that holds it, no two-phase
// commit), and the worker's completions of that work then fall on one
// shard too (terminateRouted groups them so).
//
// Which shards: a per-process hint, per pool and lane, of the shards
// where due work was last seen. When it is empty, one read without locks
// (claimPickSQL, across the shards) lists the shards of the best due
// executions, best first, with how many of them each holds. A claim
// takes the shard at the head of the list and claims from it as many as
// it still wants, then the next while it wants more. A shard that gave
// all it was asked stays at the head for the next claim (a visit), until
// it has given shardVisit executions, or, when the read saw every due
// execution of the lane (fewer than it asked for), all the read saw
// there; then it leaves the list. So a worker's consecutive claims, and
// its completions, fall on one shard, and a shard with a deep backlog
// cannot keep the others waiting: every shard with work among the best
// of the lane gets its visit before the next read looks again.
//
// What it gives up: priority order holds within a shard and, across
// shards, only at each read. Between reads a claim may take a lower
// priority execution from the shard being visited while a higher
// priority one, due since the read, waits on another shard: for at most
// shardVisit executions per shard of the hint (32 shards by default,
// Citus's shard count). Fairness holds: the read is in the lane's order,
// so an execution that is due comes among the best as those ahead of it
// are claimed, and its shard then gets a visit before any shard gets two.

// shardVisit is how many executions a shard of the hint may give, claim
// after claim, while it gives all that is asked of it, before the next
// shard's turn. Consecutive claims from one shard make a worker's
// completions fall on one shard, in larger groups: a statement on a
// distributed Postgres costs a fixed few milliseconds of planning and
// coordination, whatever its rows.
const shardVisit = 512

// pickFloor is the fewest candidates a hint's read asks for: a claim of
// one must not read the cluster every time.
const pickFloor = 64

// shardHint is the list of shards (each as its partitions) where a lane
// had due work, best first.
type shardHint struct {
	mu     sync.Mutex
	shards []hintedShard
}

// hintedShard is a shard of the hint: its partitions, the due
// executions the read saw there (all it held when the read saw fewer than
// it asked for: exact), and the executions claimed from it since.
type hintedShard struct {
	parts []int16
	seen  int
	exact bool
	taken int
}

// pop takes the shard at the head of the list.
func (h *shardHint) pop() (hintedShard, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.shards) == 0 {
		return hintedShard{}, false
	}
	s := h.shards[0]
	h.shards = h.shards[1:]
	return s, true
}

// again puts a shard that gave all that was asked of it (n more) back at
// the head of the list, for the next claim, unless it has given its
// share of the visit.
func (h *shardHint) again(s hintedShard, n int) {
	s.taken += n
	if s.taken >= shardVisit || (s.exact && s.taken >= s.seen) {
		return // its share given, or all it held when the hint was read
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shards = append([]hintedShard{s}, h.shards...)
}

// set replaces the list.
func (h *shardHint) set(shards []hintedShard) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.shards = shards
}

// laneHints are a pool's (or connection's) hints, by lane.
type laneHints struct {
	mu    sync.Mutex
	lanes map[string]*shardHint
}

// hintFor returns the hint of db's pool and lane (hints: forgotten with
// the placement they were read under).
func hintFor(db DB, lane string) *shardHint {
	lh := hints.loadOrStore(db, &laneHints{})
	lh.mu.Lock()
	defer lh.mu.Unlock()
	if lh.lanes == nil {
		lh.lanes = map[string]*shardHint{}
	}
	h, ok := lh.lanes[lane]
	if !ok {
		h = &shardHint{}
		lh.lanes[lane] = h
	}
	return h
}

// claimShards claims up to max from the shards of the lane's hint, one
// statement per shard, each its own transaction, reading the hint anew
// (once per call) when it runs out. What it claimed before an error is
// returned without the error: those leases are the caller's, and the
// error comes again at the next claim.
//
// controlled: db is the transaction of a claim that holds a controlled
// lane's room (claimCapped, claimControlledRouted), which takes from the
// lane although it has a control row, and whose statements commit or
// roll back together: an error returns nothing claimed.
func claimShards(ctx context.Context, db DB, lane string, caps []string, max int, worker string, controlled bool) ([]*ffdtype.Execution, error) {
	h := hintFor(db, lane)
	var out []*ffdtype.Execution
	read := false
	for len(out) < max {
		sh, ok := h.pop()
		if !ok {
			if read {
				break
			}
			read = true
			shards, err := dueShards(ctx, db, lane, caps, max, controlled)
			if err != nil || len(shards) == 0 {
				return partial(out, err, controlled)
			}
			h.set(shards)
			continue
		}
		want := min(max-len(out), shardVisit-sh.taken)
		xs, err := queryExecutions(db.Query(ctx, claimRoutedSQL, lane, caps, want, worker, controlled, sh.parts))
		out = append(out, xs...)
		if err != nil {
			return partial(out, err, controlled)
		}
		if len(xs) == want {
			h.again(sh, len(xs))
		}
	}
	sortClaimed(out)
	return out, nil
}

// partial is what a claim that failed after claiming out returns: out
// without the error, those leases being the caller's; but in one
// transaction (whole), whose statements roll back together, the error
// alone. Without an error it is out.
func partial(out []*ffdtype.Execution, err error, whole bool) ([]*ffdtype.Execution, error) {
	if err != nil && (whole || len(out) == 0) {
		return nil, err
	}
	sortClaimed(out)
	return out, nil
}

// dueShards lists the shards of the best due executions of a lane, best
// first, each as every partition it holds (the claim that follows takes
// whatever the shard has, not only what the read saw) and how many of
// them the read saw there.
func dueShards(ctx context.Context, db DB, lane string, caps []string, want int, controlled bool) ([]hintedShard, error) {
	limit := max(want, pickFloor)
	cands, err := pickPartitions(ctx, db, lane, caps, limit, controlled)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	pl, err := placementOf(ctx, db)
	if err != nil {
		return nil, err
	}
	var out []hintedShard
	at := map[int64]int{}
	for _, p := range cands {
		s := pl.of(p)
		i, ok := at[s]
		if !ok {
			i = len(out)
			at[s] = i
			out = append(out, hintedShard{parts: pl.parts[s], exact: len(cands) < limit})
		}
		out[i].seen++
	}
	return out, nil
}
