// Package flows stages and applies DAGs of executions (docs/design.md,
// sections 4 and 5): flows, members, dependency edges, edge-group join policies,
// cancel_flow and submit_flow, and Resolve, the one place where an
// upstream's outcome resolves edges, moves group counters and decides
// groups. The cascade calls Resolve for every completion event; apply
// calls it when the upstream has already finished.
//
// Graph changes compare-and-set the flow's graph_revision. The UPDATE that
// bumps it also locks the flow row, and the cycle check runs after it in a
// statement of its own, so under READ COMMITTED it sees every edge staged
// by a transaction that won the row before it: two stagings that would
// close a cycle together cannot both succeed.
//
// Every transaction here reads and validates first, then takes its locks
// through store.Locks, which holds them to the global order (edge groups,
// edges, executions, flows; docs/design.md section 9), then writes through
// the store. Deadlocks the order cannot rule out are retried by store.InTx.
package flows
