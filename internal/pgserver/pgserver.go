// Package pgserver runs a private PostgreSQL cluster from the locally
// installed server binaries. The test harness, `ffd dev`, `ffd demo` and
// `ffd bench` use it so that ffd needs no database set up by hand.
//
// The cluster listens on 127.0.0.1 on a free port, with its own socket
// directory, trust authentication and wal_level=logical (the outbox WAL
// stream needs it). When the calling process is root the server runs as
// the `postgres` OS user, because Postgres refuses to run as root. The
// postmaster is asked to die with its parent (Linux parent-death signal),
// so a crashed caller does not leave a server behind.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultStartTimeout bounds how long Start waits for the server to accept
// connections.
const DefaultStartTimeout = 60 * time.Second

// DefaultStopTimeout bounds a fast shutdown before the server is killed.
const DefaultStopTimeout = 30 * time.Second

// Config says how to run the cluster.
type Config struct {
	// DataDir is the cluster's data directory. Created and initialised when
	// it holds no cluster; reused as it is when it does. Required.
	DataDir string
	// BinDir holds initdb and postgres. Default: FindBinDir.
	BinDir string
	// Port to listen on at 127.0.0.1. Default 0: a free port.
	Port int
	// Durable keeps fsync on and syncs initdb's output. Default false, which
	// suits throwaway clusters (tests); `ffd dev` and `ffd bench` set it.
	Durable bool
	// Settings are extra server settings (`-c name=value`). Default none.
	Settings map[string]string
	// StartTimeout bounds the wait for readiness. Default DefaultStartTimeout.
	StartTimeout time.Duration
	// SocketDir holds the server's Unix socket; it must exist. Default: a
	// new temporary directory, removed by Stop.
	SocketDir string
}

// Server is a running private cluster.
type Server struct {
	cfg     Config
	port    int
	sockDir string
	ownSock bool
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logPath string
}

// FindBinDir locates the PostgreSQL server binaries: `pg_config --bindir`
// first, then Debian's versioned directories, newest first, then PATH.
func FindBinDir() (string, error) {
	has := func(dir string) bool {
		for _, tool := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, tool)); err != nil || fi.IsDir() {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); has(dir) {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return debianVersion(dirs[i]) > debianVersion(dirs[j]) })
	for _, dir := range dirs {
		if has(dir) {
			return dir, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); has(dir) {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL server binaries not found (tried pg_config --bindir, /usr/lib/postgresql/*/bin and PATH): install them, e.g. `apt-get install postgresql`")
}

func debianVersion(binDir string) float64 {
	v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(binDir)), 64)
	return v
}

// Start initialises the data directory if needed and starts the server,
// returning once it accepts connections.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("pgserver: DataDir is required")
	}
	if cfg.BinDir == "" {
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		cfg.BinDir = dir
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	owner, err := serverUser()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if err := owner.chown(cfg.DataDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		if err := initdb(ctx, cfg, owner); err != nil {
			return nil, err
		}
	}
	sockDir, ownSock := cfg.SocketDir, false
	if sockDir == "" {
		if sockDir, err = os.MkdirTemp("", "ffdpg-"); err != nil {
			return nil, fmt.Errorf("create socket directory: %w", err)
		}
		ownSock = true
	}
	removeSock := func() {
		if ownSock {
			os.RemoveAll(sockDir)
		}
	}
	if err := owner.chown(sockDir); err != nil {
		removeSock()
		return nil, err
	}
	// A free port can be taken between our probe and the server's bind;
	// try a few before giving up.
	var lastErr error
	for range 5 {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				removeSock()
				return nil, err
			}
		}
		s := &Server{cfg: cfg, port: port, sockDir: sockDir, ownSock: ownSock, logPath: filepath.Join(cfg.DataDir, "ffd-postgres.log")}
		lastErr = s.start(ctx, owner)
		if lastErr == nil {
			return s, nil
		}
		if cfg.Port != 0 || !strings.Contains(lastErr.Error(), "could not bind") && !strings.Contains(lastErr.Error(), "could not create listen socket") {
			break
		}
	}
	removeSock()
	return nil, lastErr
}

func initdb(ctx context.Context, cfg Config, owner osUser) error {
	args := []string{"-D", cfg.DataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"}
	if !cfg.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, "initdb"), args...)
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = owner.attr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb %s: %w\n%s", cfg.DataDir, err, out)
	}
	return nil
}

func (s *Server) start(ctx context.Context, owner osUser) error {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(s.port),
		"unix_socket_directories": s.sockDir,
		"wal_level":               "logical",
		"max_wal_senders":         "20",
		"max_replication_slots":   "20",
		"max_connections":         "300",
		"logging_collector":       "off",
	}
	if !s.cfg.Durable {
		settings["fsync"] = "off"
		settings["full_page_writes"] = "off"
	}
	for k, v := range s.cfg.Settings {
		settings[k] = v
	}
	args := []string{"-D", s.cfg.DataDir}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("open server log: %w", err)
	}
	defer logFile.Close()

	s.cmd = exec.Command(filepath.Join(s.cfg.BinDir, "postgres"), args...)
	s.cmd.Dir = os.TempDir()
	s.cmd.Stdout = logFile
	s.cmd.Stderr = logFile
	attr := owner.attr()
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	// Die with the parent, and keep terminal Ctrl-C away from the server so
	// that its owner decides how it stops.
	attr.Pdeathsig = syscall.SIGQUIT
	attr.Setpgid = true
	s.cmd.SysProcAttr = attr
	s.exited = make(chan struct{})

	// The parent-death signal fires when the *thread* that forked exits;
	// fork from a thread that lives as long as the server.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := s.cmd.Start(); err != nil {
			started <- fmt.Errorf("start postgres: %w", err)
			close(s.exited)
			return
		}
		started <- nil
		s.waitErr = s.cmd.Wait()
		close(s.exited)
		// Returning with the thread locked retires the thread, as intended:
		// the server it parented is gone.
	}()
	if err := <-started; err != nil {
		return err
	}
	if err := s.waitReady(ctx); err != nil {
		s.kill()
		return err
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(s.cfg.StartTimeout)
	for {
		select {
		case <-s.exited:
			return fmt.Errorf("postgres exited during start-up (%v): %s", s.waitErr, s.logTail())
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, s.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after %s: %v: %s", s.cfg.StartTimeout, err, s.logTail())
		}
		time.Sleep(30 * time.Millisecond)
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(bytes.TrimSpace(b))
}

// Port is the TCP port the server listens on at 127.0.0.1.
func (s *Server) Port() int { return s.port }

// DataDir is the cluster's data directory.
func (s *Server) DataDir() string { return s.cfg.DataDir }

// URL is a connection URL for database dbname as the superuser postgres.
func (s *Server) URL(dbname string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.port, dbname)
}

// Exited is closed once the server process has exited.
func (s *Server) Exited() <-chan struct{} { return s.exited }

// Stop shuts the server down (fast shutdown: open sessions are ended,
// committed work is kept) and waits for it to exit, killing it if it takes
// longer than DefaultStopTimeout or ctx allows.
func (s *Server) Stop(ctx context.Context) error {
	if s.ownSock {
		defer os.RemoveAll(s.sockDir)
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	timer := time.NewTimer(DefaultStopTimeout)
	defer timer.Stop()
	select {
	case <-s.exited:
		return nil
	case <-timer.C:
	case <-ctx.Done():
	}
	s.kill()
	return errors.New("postgres did not stop in time and was killed")
}

// Crash ends the server the way a crash would look to its clients: an
// immediate shutdown (what `pg_ctl stop -m immediate` sends), with no
// checkpoint, so the next Start on the same data directory runs crash
// recovery. It returns once the server has exited. The fault suite uses
// it; the socket directory is kept for the restart.
func (s *Server) Crash() { s.kill() }

func (s *Server) kill() {
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
		return
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.exited
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// osUser is who the server runs as: the caller, or `postgres` for root.
type osUser struct {
	switchTo bool
	uid, gid uint32
}

func serverUser() (osUser, error) {
	if os.Geteuid() != 0 {
		return osUser{}, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return osUser{}, fmt.Errorf("running as root, PostgreSQL must run as the postgres OS user, which was not found: %w", err)
	}
	uid, _ := strconv.ParseUint(u.Uid, 10, 32)
	gid, _ := strconv.ParseUint(u.Gid, 10, 32)
	return osUser{switchTo: true, uid: uint32(uid), gid: uint32(gid)}, nil
}

func (o osUser) attr() *syscall.SysProcAttr {
	if !o.switchTo {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: o.uid, Gid: o.gid}}
}

// chown hands dir to the server user, and checks that the user can reach
// it (a data directory under root's 0700 home cannot work).
func (o osUser) chown(dir string) error {
	if !o.switchTo {
		return nil
	}
	err := filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(o.uid), int(o.gid))
	})
	if err != nil {
		return fmt.Errorf("hand %s to the postgres user: %w", dir, err)
	}
	abs, _ := filepath.Abs(dir)
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().Perm()&0o001 == 0 && st.Uid != o.uid {
			return fmt.Errorf("the postgres user cannot reach %s: %s is not searchable by others; choose a data directory outside it", dir, p)
		}
		if p == "/" {
			return nil
		}
	}
}

// HasLibrary reports whether the server binaries found by FindBinDir come
// with the loadable module name (such as "pg_stat_statements"), which
// Debian ships in the server package and other builds in a contrib one.
func HasLibrary(name string) bool {
	bin, err := FindBinDir()
	if err != nil {
		return false
	}
	dirs := []string{filepath.Join(filepath.Dir(bin), "lib")}
	if out, err := exec.Command(filepath.Join(bin, "pg_config"), "--pkglibdir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	} else if out, err := exec.Command("pg_config", "--pkglibdir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, name+".so")); err == nil {
			return true
		}
	}
	return false
}
