package testdb

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(mainWith(func() int { return helper(mode) }))
	}
	Main(m)
}

// Two tests get two databases; a NOTIFY in one is never heard in the other.
func TestIsolation(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := New(t), New(t)
	if a.Name == b.Name {
		t.Fatalf("two tests share database %s", a.Name)
	}

	listenA := listen(ctx, t, a.URL)
	listenB := listen(ctx, t, b.URL)

	if _, err := a.Pool.Exec(ctx, `SELECT pg_notify('ff_ready', 'only-a')`); err != nil {
		t.Fatal(err)
	}
	n, err := listenA.WaitForNotification(ctx)
	if err != nil || n.Payload != "only-a" {
		t.Fatalf("database a: want notification only-a, got %v, %v", n, err)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if n, err := listenB.WaitForNotification(short); err == nil {
		t.Fatalf("database b heard %q sent in database a", n.Payload)
	}

	// A row in one is not in the other.
	if _, err := a.Pool.Exec(ctx, `INSERT INTO ff_outbox_consumer (name, stream) VALUES ('iso', 'all')`); err != nil {
		t.Fatal(err)
	}
	var count int
	if err := b.Pool.QueryRow(ctx, `SELECT count(*) FROM ff_outbox_consumer`).Scan(&count); err != nil || count != 0 {
		t.Fatalf("database b sees %d consumers (err %v), want 0", count, err)
	}
}

func listen(ctx context.Context, t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `LISTEN ff_ready`); err != nil {
		t.Fatal(err)
	}
	return conn
}

func TestClusterSettings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := New(t)
	var walLevel string
	if err := db.Pool.QueryRow(ctx, `SHOW wal_level`).Scan(&walLevel); err != nil || walLevel != "logical" {
		t.Fatalf("wal_level = %q (err %v), want logical", walLevel, err)
	}
	if os.Getenv(EnvURL) != "" || os.Geteuid() != 0 {
		return
	}
	// Tests run as root: the server must run as the postgres user.
	var pid int
	if err := db.Pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	want, err := user.Lookup("postgres")
	if err != nil {
		t.Fatal(err)
	}
	if got := procUID(t, pid); got != want.Uid {
		t.Fatalf("server backend runs as uid %s, want the postgres user's %s", got, want.Uid)
	}
}

func procUID(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(rest)[0]
		}
	}
	t.Fatalf("no Uid line for pid %d", pid)
	return ""
}

const helperEnv = "FFD_TESTDB_HELPER"

// helper runs in a child process of TestCleanup, which watches what the
// harness leaves behind when the tests pass, fail or the binary is killed.
func helper(mode string) int {
	c, err := get()
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	pm, err := os.ReadFile(filepath.Join(c.root, "data", "postmaster.pid"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	postmaster, _, _ := strings.Cut(string(pm), "\n")
	fmt.Printf("CLUSTER %s %s\n", c.root, postmaster)
	switch mode {
	case "fail":
		return 1
	case "die":
		time.Sleep(time.Minute) // the parent kills us here
	}
	return 0
}

// The harness removes its directory and stops its server when the tests end
// (passing or failing), and a test binary that is killed takes its server
// with it; the next run then removes the leftover directory.
func TestCleanup(t *testing.T) {
	t.Parallel()
	if os.Getenv(EnvURL) != "" {
		t.Skip("cleanup of the private cluster; " + EnvURL + " selects an external server")
	}
	for _, mode := range []string{"pass", "fail", "die"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), helperEnv+"="+mode)
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var root string
			var postmaster int
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if _, err := fmt.Sscanf(sc.Text(), "CLUSTER %s %d", &root, &postmaster); err == nil {
					break
				}
			}
			if root == "" {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatal("helper printed no cluster line")
			}
			if mode == "die" {
				if err := cmd.Process.Kill(); err != nil {
					t.Fatal(err)
				}
			}
			go io.Copy(io.Discard, stdout)
			err = cmd.Wait()
			if (mode == "pass") != (err == nil) {
				t.Fatalf("helper in mode %s exited with %v", mode, err)
			}
			if mode == "die" && !pgserver.DiesWithParent {
				// No parent-death signal here: the next run's sweep stops
				// the orphaned server.
				removeStale()
			}
			waitGone(t, postmaster)
			if mode == "die" {
				// The killed binary could not clean up; the next run's sweep
				// does (another test binary starting meanwhile may already
				// have). The postmaster's children may still be writing in
				// the directory for a moment after it died (under load, a
				// sweep then removes all but their last files): sweep until
				// it is gone, as successive runs would.
				deadline := time.Now().Add(20 * time.Second)
				for removeStale(); time.Now().Before(deadline); removeStale() {
					if _, err := os.Stat(root); errors.Is(err, os.ErrNotExist) {
						break
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("cluster directory %s left behind (stat: %v)", root, err)
			}
		})
	}
}

func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for pgserver.Alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("postmaster %d still running after its test binary ended", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
