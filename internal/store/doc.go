// Package store is ffd's data-access layer: every statement that reads or
// writes an ff_* table lives here, one file per table or aggregate, behind
// named functions with typed parameters and results. The packages above it
// (leases, flows, cascade, outbox, daemon) validate input, decide, and call
// these functions; none of them holds SQL of its own, and .ci/run checks
// that no SQL against ff_* tables appears anywhere else.
//
// The vocabulary the schema's CHECK constraints and triggers use (states,
// outcomes, event types, policies, channel names) is defined once, in
// names.go, and names_test.go reads the constraints and trigger bodies of
// a migrated database to prove the two agree.
//
// Rows are scanned by column name (pgx.RowToStructByName), so a statement's
// select list and its Go struct cannot drift apart silently: a column
// without a field, or a field without a column, is an error.
//
// Transactions that lock rows of several tables take them in the global
// order of docs/design.md section 9 through the helpers of lock.go.
//
// Partitions. A statement on the flow and execution tables names the
// partition_key of every row it touches, so that on a distributed Postgres
// it runs on one shard, except where its comment says "Cross-partition:"
// and why (docs/scaling.md lists them). distribution.go checks that every
// unique index and foreign key a distributed Postgres would have to
// enforce includes partition_key.
package store
