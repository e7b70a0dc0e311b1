// Package cascade dispatches completion events (docs/design.md section 5).
//
// Dispatching one event is one transaction: lock the undispatched event
// (SKIP LOCKED, so racing dispatchers split the work), resolve every applied
// outgoing edge of its execution through flows.Resolve (which moves group
// counters, decides groups, readies satisfied downstreams, skips impossible
// ones through the shared terminal function and queues cancel_remaining
// groups), then mark the event dispatched, and commit. Either all of it
// commits or none of it does: a crash anywhere leaves the event undispatched
// and no edge resolved, and the next dispatch does the whole thing.
//
// The sibling-cancel tick drains ff_pending_cancel_group one group per
// transaction, cancelling each sibling still live through the terminal
// function (fenced, lease event `revoked`, completion event `cancelled`), and
// deleting the group's row in the same transaction.
//
// docs/cascade.md explains why each guarantee holds.
package cascade
