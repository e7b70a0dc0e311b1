package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

func ffd(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code = run(ctx, append(args, "--log-format", "json"), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestMigrateCommands(t *testing.T) {
	t.Parallel()
	db := testdb.NewEmpty(t)
	url := "--database-url=" + db.URL

	code, out, errOut := ffd(t, "migrate", "status", url)
	if code != 0 || !strings.Contains(out, "current version: 0") || !strings.Contains(out, "pending") {
		t.Fatalf("status on empty database: code %d, out %q, err %q", code, out, errOut)
	}
	for range 2 {
		code, out, errOut = ffd(t, "migrate", "up", url)
		if code != 0 || !strings.Contains(out, "schema at version") {
			t.Fatalf("migrate up: code %d, out %q, err %q", code, out, errOut)
		}
	}
	code, out, _ = ffd(t, "migrate", "status", url)
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("status after up: code %d, out %q", code, out)
	}

	// A database from a newer ffd is refused by name of both versions.
	_, err := db.Pool.Exec(context.Background(), `INSERT INTO `+schema.LedgerTable+` (version_id, is_applied) VALUES (9999, true)`)
	if err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"migrate", "status"}, {"migrate", "up"}} {
		code, _, errOut = ffd(t, append(cmd, url)...)
		if code == 0 || !strings.Contains(errOut, "9999") || !strings.Contains(errOut, "upgrade ffd") {
			t.Fatalf("%v on a newer schema: code %d, stderr %q; want a refusal naming version 9999", cmd, code, errOut)
		}
	}
}

func TestMissingDatabaseURL(t *testing.T) {
	t.Setenv("FFD_DATABASE_URL", "")
	code, _, errOut := ffd(t, "migrate", "status")
	if code == 0 || !strings.Contains(errOut, "FFD_DATABASE_URL") || !strings.Contains(errOut, "--database-url") {
		t.Fatalf("migrate status without a database: code %d, stderr %q", code, errOut)
	}
}

func TestBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"migrate", "up", "--log-level", "loud"}, {"nope"}, {"dev", "--port", "70000"}} {
		var out, errOut bytes.Buffer
		code := run(context.Background(), args, &out, &errOut)
		if code == 0 {
			t.Errorf("ffd %v succeeded, want an error", args)
		}
	}
}

// ffd dev starts a private server, migrates it, prints its URL, and stops
// it on cancel; a second start reuses the data directory.
func TestDev(t *testing.T) {
	t.Parallel()
	if os.Getenv(testdb.EnvURL) != "" {
		t.Skip("ffd dev runs a private server; this run uses an external one")
	}
	// The server user (postgres, when tests run as root) must reach it.
	root, err := os.MkdirTemp("", "ffd-dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(root, "pg")
	for round := range 2 {
		ctx, cancel := context.WithCancel(context.Background())
		pr, pw := io.Pipe()
		done := make(chan int, 1)
		var logs bytes.Buffer
		go func() {
			done <- run(ctx, []string{"dev", "--data-dir", dataDir, "--port", "0", "--log-format", "json"}, pw, &logs)
			pw.Close()
		}()
		var url string
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if u, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "FFD_DATABASE_URL="); ok {
				url = u
				break
			}
		}
		go io.Copy(io.Discard, pr)
		if url == "" {
			cancel()
			code := <-done
			t.Fatalf("round %d: ffd dev printed no URL (exit %d): %s", round, code, logs.String())
		}
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			cancel()
			t.Fatalf("round %d: connect to %s: %v", round, url, err)
		}
		var v int64
		err = conn.QueryRow(ctx, `SELECT max(version_id) FROM `+schema.LedgerTable).Scan(&v)
		conn.Close(ctx)
		if err != nil || v != schema.Latest() {
			cancel()
			t.Fatalf("round %d: schema version %d (%v), want %d", round, v, err, schema.Latest())
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("round %d: ffd dev exited %d after cancel, want 0", round, code)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "postmaster.pid")); !os.IsNotExist(err) {
			t.Fatalf("round %d: server still running after ffd dev returned", round)
		}
	}
}
