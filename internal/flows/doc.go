// Package flows will stage and apply DAGs: flows, members, edges, edge
// group policies, cancel_flow and submit_flow (SPEC section 6). Built by
// the flows issue.
package flows
