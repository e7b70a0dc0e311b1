// Package citus holds the integration suite that runs ffd against a live
// Citus cluster (docs/scaling.md, "Citus"). CI cannot start one, so the
// suite is built only with the citus tag, and needs FFD_TEST_CITUS_URL to
// name the coordinator of a cluster whose database has the citus
// extension and its worker nodes added:
//
//	FFD_TEST_CITUS_URL='postgres://postgres@127.0.0.1:9700/ffd' go test -tags citus ./internal/citus
//
// The suite migrates the database and places the tables as `ffd migrate
// distribution` prints (when they are not placed yet), then runs each
// capability against the coordinator. Set citus.recover_2pc_interval to
// a second on the coordinator: a consumer's events wait for it
// (docs/scaling.md). Every node needs wal_level = logical for the WAL
// stream's test, and `go` on PATH for the demo's. Tests share the
// database and keep apart by lane and flow; run it against a database
// kept for the purpose.
//
// The fault suite runs on a Citus cluster it starts itself:
// go test ./internal/chaos -run TestFaultSuite -chaos.citus-nodes 2.
package citus
