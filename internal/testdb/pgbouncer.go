package testdb

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PgBouncer is a PgBouncer in transaction-pooling mode in front of one
// test database, stopped when the test ends.
type PgBouncer struct {
	// URL connects to the test's database through the bouncer.
	URL string
}

// StartPgBouncer runs Debian's pgbouncer (or the one on PATH) in front of
// db with poolSize server connections, in transaction pooling. The test
// fails when pgbouncer is not installed: .ci/run installs it.
func StartPgBouncer(t testing.TB, db *DB, poolSize int) *PgBouncer {
	t.Helper()
	bin := findPgBouncer(t)
	u, err := url.Parse(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "ffdpgb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	writeBouncerConfig(t, dir, u, listen, poolSize)
	runBouncer(t, bin, dir)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(listen))
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
			t.Fatalf("pgbouncer did not listen on %s: %s", addr, log)
		}
	}
	bu := *u
	bu.Host = addr
	return &PgBouncer{URL: bu.String()}
}

// findPgBouncer is the pgbouncer binary on PATH or Debian's.
func findPgBouncer(t testing.TB) string {
	t.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err == nil {
		return bin
	}
	if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
		t.Fatal("pgbouncer not found: install it (Debian: apt-get install pgbouncer); ./test.sh does")
	}
	return "/usr/sbin/pgbouncer"
}

// writeBouncerConfig writes pgbouncer.ini and its users file into dir:
// the database at u behind 127.0.0.1:listen, poolSize server connections.
func writeBouncerConfig(t testing.TB, dir string, u *url.URL, listen, poolSize int) {
	t.Helper()
	host, port, _ := net.SplitHostPort(u.Host)
	dbname := u.Path[1:]
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = %d
max_client_conn = 2000
ignore_startup_parameters = extra_float_digits
server_reset_query =
logfile = %s/pgbouncer.log
pidfile = %s/pgbouncer.pid
`, dbname, host, port, dbname, listen, dir, poolSize, dir, dir)
	if err := os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

// runBouncer starts pgbouncer on dir's configuration until the test ends.
func runBouncer(t testing.TB, bin, dir string) {
	t.Helper()
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		// pgbouncer refuses to run as root; it drops to this user itself.
		pg, err := user.Lookup("postgres")
		if err != nil {
			t.Fatal(err)
		}
		uid, _ := strconv.Atoi(pg.Uid)
		gid, _ := strconv.Atoi(pg.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"-u", "postgres"}, args...)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = bouncerAttr()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pgbouncer: %v", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}
