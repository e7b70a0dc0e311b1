// Package leases is the execution state machine of docs/design.md section 3: create,
// claim, renew, complete, fail, cancel, revoke, and the lapse, timeout and
// deadline transitions the daemon's timeout worker calls.
//
// Every transition is one transaction, and one SQL statement wherever
// Postgres allows: a data-modifying CTE updates the execution, closes its
// attempt, and writes the lease and completion events together. Terminal
// transitions all go through Terminate, the one place that writes
// completion events, so that invariant 1 (exactly one completion event per
// terminal transition) has a single owner; the database backs it with a
// unique index on the event's execution.
//
// Fencing. lease_epoch grows on every ownership change: claim, expiry,
// revoke, cancel. Renew, complete and fail name the epoch they hold and
// match nothing once it moved on; the caller gets a *ffdtype.LeaseLostError
// and nothing is written. Complete and fail are idempotent: repeating one
// that already succeeded at the same epoch finds its attempt row (attempts
// record the epoch they ran under) and returns the stored outcome.
//
// Clocks. Every time is computed by the database (now()), including run_at
// after a backoff, lease expiry and deadlines, so hosts with skewed clocks
// agree.
//
// Each function takes a DB, satisfied by *pgxpool.Pool and by pgx.Tx, so a
// caller can run any operation inside its own transaction. Serialization
// failures and deadlocks are retried when the function owns the
// transaction; inside a caller's transaction they are returned, since the
// caller's transaction is aborted.
package leases
