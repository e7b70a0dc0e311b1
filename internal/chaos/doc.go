//go:build linux

// Package chaos is ffd's fault suite: it runs ffd the way production and
// its failures will, and checks that nothing was lost.
//
// It builds on Linux only: its faults are Unix signals (SIGKILL, SIGSTOP)
// and its processes die with the suite through Linux's parent-death
// signal. The rest of ffd builds and runs on Linux, macOS and Windows.
//
// Run starts a private PostgreSQL cluster of its own (so that it can crash
// it), migrates it with the real `ffd` binary, and starts, as separate OS
// processes under a supervisor that restarts them like systemd would:
//
//   - several daemons (`ffd run`),
//   - several worker processes (the calling test binary re-executed in the
//     worker role, WorkerMain, using the public Go API as an application
//     would),
//   - a named cursor consumer (`ffd events tail --consumer --follow`) and a
//     WAL consumer (`ffd events tail --wal --follow`), each appending the
//     JSON lines it prints to a file.
//
// While a submitter feeds random DAGs (internal/oracle) through the public
// API, as every fourth flow a durable workflow (durable.go: steps
// spawned at run time, a sleep, a wait for a signal the harness sends),
// and as another fourth a keyed flow (keyed.go: steps under tenants'
// concurrency keys in a rate-limited lane),
// a fault loop injects, one at a time: SIGKILL of a daemon, of a
// worker or of a consumer; pg_terminate_backend of the suite's sessions;
// a crash restart of Postgres (immediate shutdown, kept down a while); and
// a daemon frozen with SIGSTOP while it is inside a transaction, which the
// session guard must cut loose while the others keep working.
//
// When the faults stop, Run waits for the system to drain and checks:
// the quiescent invariants (store.CheckQuiescent); the ground truth of every
// DAG (each node ends as its policies and its handler's fixed outcome
// imply), of every durable workflow (completed with all its spawned
// steps, its gate woken by its signal) and of every keyed flow
// (completed; no key ever above its limit in samples taken through the
// faults; no window of starts above the lane's rate); every submitted
// flow finished; each consumer saw every event id
// of the outbox exactly once after dedupe, and nothing else; and progress
// went on while a daemon was frozen. Every breach is a Violation in the
// Report, which also gives the figures (flows, executions, faults, drain
// time, time to resume after each crash restart, duplicates).
//
// The short form runs in CI as an ordinary test; the long form is the
// same test with -chaos.duration (docs/development.md).
package chaos
