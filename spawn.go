package ffd

import (
	"context"
	"fmt"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/flows"
)

// Spawn limits: one spawn adds at most this many steps and edges (a map
// over 10,000 items with its join).
const (
	MaxSpawnNodes = flows.MaxSpawnNodes
	MaxSpawnEdges = flows.MaxSpawnEdges
)

// CompleteAndSpawn completes the running flow member id, fenced on
// epoch, and adds p's steps and edges to its flow in the same
// transaction: all of it or nothing. A lost lease adds nothing
// (ErrLeaseLost). New steps without incoming edges start at once; an
// edge may go into an existing step that is blocked and whose join is
// undecided, which then waits for it too. A worker's handler calls
// Job.Spawn instead.
func (c *Client) CompleteAndSpawn(ctx context.Context, id ExecutionID, epoch int64, result []byte, p SpawnParams) (*Ending, *Spawned, error) {
	return flows.CompleteAndSpawn(ctx, c.pool, c.limits, id, epoch, result, p)
}

// CompleteAndSpawnTx is CompleteAndSpawn inside tx.
func (c *Client) CompleteAndSpawnTx(ctx context.Context, tx pgx.Tx, id ExecutionID, epoch int64, result []byte, p SpawnParams) (*Ending, *Spawned, error) {
	return flows.CompleteAndSpawn(ctx, tx, c.limits, id, epoch, result, p)
}

// spawnList gathers a handler's spawns until its completion writes them.
type spawnList struct {
	mu sync.Mutex
	p  *SpawnParams
}

// Spawn adds steps and edges to the job's flow when the handler returns
// without an error: written with its result, in one transaction, fenced
// by its lease (a handler whose lease is lost adds nothing). Several
// calls add up; a handler that returns an error, or a wait (Sleep,
// WaitForSignal), adds nothing. It checks the spawn's shape at once (refs, edges,
// cycles, policies, the limits MaxSpawnNodes and MaxSpawnEdges); what
// needs the database (step names already taken, edges into steps that
// have started) is checked when it is written, and fails the attempt.
func (j *Job) Spawn(p SpawnParams) error {
	if j.FlowID == nil {
		return fault.Invalid(KindNotMember, "execution_id", j.ID.String(), "only a flow member can spawn steps into its flow")
	}
	j.spawns.mu.Lock()
	defer j.spawns.mu.Unlock()
	all := SpawnParams{}
	if j.spawns.p != nil {
		all = *j.spawns.p
	}
	all.Nodes = append(all.Nodes[:len(all.Nodes):len(all.Nodes)], p.Nodes...)
	all.Edges = append(all.Edges[:len(all.Edges):len(all.Edges)], p.Edges...)
	if err := flows.ValidateSpawn(all); err != nil {
		return err
	}
	j.spawns.p = &all
	return nil
}

// spawned is what the handler spawned; nil for nothing.
func (j *Job) spawned() *SpawnParams {
	j.spawns.mu.Lock()
	defer j.spawns.mu.Unlock()
	return j.spawns.p
}

// Map is a spawn that maps over items: one step per item, named
// prefix-0, prefix-1, ..., each with its own params, and, when join is
// set, a new step that waits for all of them (join.Policy: all_of by
// default; any_of or quorum over them).
func Map(prefix string, items []CreateParams, join *SubmitNode) SpawnParams {
	p := SpawnParams{Nodes: make([]SubmitNode, 0, len(items)+1)}
	for i, it := range items {
		p.Nodes = append(p.Nodes, SubmitNode{Ref: fmt.Sprintf("%s-%d", prefix, i), Params: it})
	}
	if join != nil {
		p.Nodes = append(p.Nodes, *join)
		for _, n := range p.Nodes[:len(items)] {
			p.Edges = append(p.Edges, SubmitEdge{From: n.Ref, To: join.Ref})
		}
	}
	return p
}

// MapInto is Map whose join is a step the flow already has, blocked on
// its upstreams (the spawner, typically): it waits for every item's
// step as well, under its own policy.
func MapInto(prefix string, items []CreateParams, step string) SpawnParams {
	p := Map(prefix, items, nil)
	for _, n := range p.Nodes {
		p.Edges = append(p.Edges, SubmitEdge{From: n.Ref, To: step})
	}
	return p
}
