// Package ffd is the Go API of ffd, a Postgres-native engine for durable
// work that runs as DAGs.
//
// A Client creates, claims, completes and inspects executions and flows.
// The methods that create, claim or end them have a ...Tx variant
// (CreateTx, CreateManyTx, SubmitFlowTx, ClaimTx, CompleteTx, FailTx,
// CancelTx, ...), as do most reads (GetTx, ListTx, DescribeFlowTx, ...);
// each runs inside the caller's pgx.Tx, so an application can enqueue work
// in the same transaction as its own writes (a rollback leaves no trace).
// Reruns and the administrative calls (lanes, schedules, consumers) run in
// transactions of their own, and GetByUUID, Attempts and FlowEdges have no
// variant. A Worker runs a handler for the executions
// of some lanes: it claims as many as it has free slots, wakes on the
// ff_ready notification with a polling fallback, heartbeats, and completes
// or fails each execution under its fenced lease.
//
// Leases are fenced: a claim hands out (execution, attempt, lease_epoch),
// and renew, complete and fail name that epoch. When the lease was taken
// away (expiry, revoke, cancel) they return an error matching ErrLeaseLost
// and change nothing. Complete and fail are idempotent.
//
// Errors are typed: match them with errors.Is against ErrNotFound,
// ErrValidation, ErrConflict, ErrStaleRevision, ErrLeaseLost and
// ErrAlreadyTerminal, and with errors.As for details (*ValidationError
// names the field and value).
//
// The rows, vocabulary, ids, parameters and errors are declared once, in
// package ffdtype, and are the same types here (ffd.Execution is
// ffdtype.Execution): code that must not import ffd itself can use
// ffdtype alone. Worker and Daemon share one lifecycle: Start(ctx), then
// Stop(ctx), which returns once they have stopped or ctx has ended.
package ffd
