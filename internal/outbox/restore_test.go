package outbox_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/testdb"
)

// runOne creates, claims and completes one solo execution: one
// completion event.
func runOne(t *testing.T, ctx context.Context, db *pgxpool.Pool, lane string) {
	t.Helper()
	if _, _, err := leases.Create(ctx, db, leases.Limits{}, ffdtype.CreateParams{Lane: lane}); err != nil {
		t.Fatal(err)
	}
	xs, err := leases.Claim(ctx, db, ffdtype.ClaimParams{Lane: lane, Worker: "w/1", Max: 1})
	if err != nil || len(xs) != 1 {
		t.Fatalf("claim: %v %v", xs, err)
	}
	if _, err := leases.Complete(ctx, db, leases.Limits{}, xs[0].ID, xs[0].LeaseEpoch, nil); err != nil {
		t.Fatal(err)
	}
}

// drain reads every event a named consumer has left, returning how many.
func drain(t *testing.T, ctx context.Context, db *pgxpool.Pool, name string) int {
	t.Helper()
	total := 0
	for {
		n, err := outbox.ConsumeOnce(ctx, db, name, 100, func(context.Context, pgx.Tx, []ffdtype.OutboxEvent) error { return nil })
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return total
		}
		total += n
	}
}

// docs/operations.md's procedure for moving ffd with a logical dump: a
// drained database dumped from one cluster and restored into a new one
// keeps the old clusters' transaction ids in its outbox and cursors, so a
// consumer skips the new cluster's events; emptying the outboxes and
// rewinding the cursors, as the docs say, makes it read them.
func TestLogicalRestoreProcedureKeepsConsumersReading(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := f.Ctx
	// Age the source's transaction ids past where a new cluster starts.
	for range 200 {
		if _, err := f.Pool.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := outbox.Register(ctx, f.Pool, "audit", ffdtype.StreamAll, ffdtype.FromStart); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		runOne(t, ctx, f.Pool, "move")
	}
	// A cursor reads an event once no older transaction of the cluster
	// is open (other tests share it): wait for the three.
	read := 0
	f.WaitFor("the consumer to read the 3 events", func() bool {
		read += drain(t, ctx, f.Pool, "audit")
		return read >= 3
	})
	if read != 3 {
		t.Fatalf("before the move the consumer read %d events, want 3", read)
	}

	bin, err := pgserver.FindBinDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := testdb.ServerDir(t)
	dump := filepath.Join(dir, "ffd.dump")
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_dump"), "--format=custom", "--file="+dump, f.DB.URL).CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: filepath.Join(dir, "new")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	if out, err := exec.CommandContext(ctx, filepath.Join(bin, "pg_restore"), "--no-owner", "--dbname="+srv.URL("postgres"), dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	moved, err := pgxpool.New(ctx, srv.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(moved.Close)

	// Without the procedure: the new cluster's event sorts before the
	// cursor, and the consumer never sees it.
	runOne(t, ctx, moved, "move")
	if n := drain(t, ctx, moved, "audit"); n != 0 {
		t.Fatalf("without the procedure the consumer read %d events; the hazard the docs describe is gone?", n)
	}

	// The procedure (docs/operations.md, "Backup and restore").
	if _, err := moved.Exec(ctx, `BEGIN;
		DELETE FROM ff_completion_event;
		DELETE FROM ff_lease_event;
		UPDATE ff_outbox_consumer SET cursor_txid = '0', cursor_event_id = 0;
		COMMIT;`); err != nil {
		t.Fatal(err)
	}
	runOne(t, ctx, moved, "move")
	if n := drain(t, ctx, moved, "audit"); n != 1 {
		t.Fatalf("after the procedure the consumer read %d events, want the new one", n)
	}
}
