// Package pgserver runs a private PostgreSQL cluster from the locally
// installed server binaries. The test harness, `ffd dev`, `ffd demo` and
// `ffd bench` use it so that ffd needs no database set up by hand.
//
// The cluster listens on 127.0.0.1 on a free port, with its own socket
// directory (Unix), trust authentication and wal_level=logical (the
// outbox WAL stream needs it). When the calling process is root the
// server runs as the `postgres` OS user, because Postgres refuses to run
// as root. On Linux the postmaster is asked to die with its parent (the
// parent-death signal), so a crashed caller does not leave a server
// behind; elsewhere the next start cleans up after it.
//
// What differs between systems (process attributes, signals, the server
// user, socket settings) lives in proc_*.go behind build tags; FindBinDir
// knows where each system's packagers install the binaries.
package pgserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
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

// EnvBinDir is the environment variable that names the PostgreSQL bin
// directory to use, ahead of any search.
const EnvBinDir = "FFD_PG_BIN_DIR"

// FindBinDir locates the PostgreSQL server binaries (initdb and postgres):
// the directory in FFD_PG_BIN_DIR when set; else `pg_config --bindir`;
// else the places packagers install them on this system (Debian's and
// the PGDG RPMs' versioned directories, Homebrew's, Postgres.app's, the
// Windows installer's), newest version first; else PATH.
func FindBinDir() (string, error) {
	if dir := os.Getenv(EnvBinDir); dir != "" {
		if hasServer(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("%s=%s: no %s and %s there", EnvBinDir, dir, exe("initdb"), exe("postgres"))
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if dir := strings.TrimSpace(string(out)); hasServer(dir) {
			return dir, nil
		}
	}
	patterns := binDirPatterns(runtime.GOOS)
	if dir := search(patterns); dir != "" {
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if dir := filepath.Dir(p); hasServer(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("PostgreSQL server binaries (%s, %s) not found: tried $%s, pg_config --bindir, %s and PATH. %s",
		exe("initdb"), exe("postgres"), EnvBinDir, strings.Join(patterns, ", "), installHint(runtime.GOOS))
}

// binDirPatterns are where packagers put the server binaries on goos.
func binDirPatterns(goos string) []string {
	switch goos {
	case "darwin":
		return []string{
			"/opt/homebrew/opt/postgresql@*/bin", "/usr/local/opt/postgresql@*/bin", // Homebrew, Apple silicon and Intel
			"/opt/homebrew/opt/postgresql/bin", "/usr/local/opt/postgresql/bin",
			"/Applications/Postgres.app/Contents/Versions/*/bin",
		}
	case "windows":
		return []string{`C:\Program Files\PostgreSQL\*\bin`}
	default:
		return []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} // Debian and Ubuntu; the PGDG RPMs
	}
}

// installHint says how to get the server binaries on goos.
func installHint(goos string) string {
	switch goos {
	case "darwin":
		return "Install them with `brew install postgresql@17` or Postgres.app, or set " + EnvBinDir + "."
	case "windows":
		return "Install them with the PostgreSQL installer for Windows, or set " + EnvBinDir + "."
	default:
		return "Install them (Debian and Ubuntu: `apt-get install postgresql`), or set " + EnvBinDir + "."
	}
}

// search returns the directory with the server binaries among the
// patterns' matches, the highest PostgreSQL version first; "" if none.
func search(patterns []string) string {
	var dirs []string
	for _, p := range patterns {
		m, _ := filepath.Glob(p)
		dirs = append(dirs, m...)
	}
	sort.SliceStable(dirs, func(i, j int) bool { return majorOf(dirs[i]) > majorOf(dirs[j]) })
	for _, dir := range dirs {
		if hasServer(dir) {
			return dir
		}
	}
	return ""
}

// majorOf reads the version in a packager's directory name
// (".../postgresql/17/bin", ".../postgresql@16/bin", ".../Versions/15/bin",
// "/usr/pgsql-14/bin"): the last number in it, 0 when there is none.
func majorOf(dir string) float64 {
	elems := strings.FieldsFunc(filepath.ToSlash(dir), func(r rune) bool { return r == '/' || r == '@' || r == '-' })
	for i := len(elems) - 1; i >= 0; i-- {
		if v, err := strconv.ParseFloat(elems[i], 64); err == nil {
			return v
		}
	}
	return 0
}

// hasServer reports whether dir holds initdb and postgres.
func hasServer(dir string) bool {
	for _, tool := range []string{"initdb", "postgres"} {
		if fi, err := os.Stat(filepath.Join(dir, exe(tool))); err != nil || fi.IsDir() {
			return false
		}
	}
	return true
}

// exe is the file name of a PostgreSQL program on this system.
func exe(name string) string {
	if runtime.GOOS == "windows" {
		return name + ".exe"
	}
	return name
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
	if err := checkFree(cfg); err != nil {
		return nil, err
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

// InUseError is a data directory another running server holds, or a
// port something else listens on: typically a second `ffd dev`.
type InUseError struct {
	DataDir string
	PID     int // the server holding DataDir; 0 when the port is the problem
	Port    int // its port, or the port asked for
}

func (e *InUseError) Error() string {
	if e.PID == 0 {
		return fmt.Sprintf("port %d on 127.0.0.1 is in use (another ffd dev, or a PostgreSQL?): pick another port", e.Port)
	}
	return fmt.Sprintf("the data directory %s is in use by a running PostgreSQL (pid %d, port %d), probably another ffd dev: use it (postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable), stop it, or give this one another data directory and port",
		e.DataDir, e.PID, e.Port, e.Port)
}

// checkFree refuses, before anything starts, a data directory a live
// server holds (its postmaster.pid names a running process) and a port
// in use: starting anyway would fail later, and a readiness probe on a
// taken port could even reach the other server and report ours ready.
func checkFree(cfg Config) error {
	if pid, port, ok := PIDFile(cfg.DataDir); ok && Alive(pid) {
		return &InUseError{DataDir: cfg.DataDir, PID: pid, Port: port}
	}
	if cfg.Port != 0 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(cfg.Port)))
		if err != nil {
			return &InUseError{DataDir: cfg.DataDir, Port: cfg.Port}
		}
		ln.Close()
	}
	return nil
}

// PIDFile reads the postmaster's pid (line 1) and port (line 4; 0 while
// not written yet) from the postmaster.pid of the data directory dir; ok
// is false when there is none or its pid cannot be read.
func PIDFile(dir string) (pid, port int, ok bool) {
	b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid"))
	if err != nil {
		return 0, 0, false
	}
	// A postmaster writes its pid first; the port comes a little later.
	lines := strings.Split(string(b), "\n")
	pid, err = strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return 0, 0, false
	}
	if len(lines) >= 4 {
		port, _ = strconv.Atoi(strings.TrimSpace(lines[3]))
	}
	return pid, port, true
}

func initdb(ctx context.Context, cfg Config, owner osUser) error {
	args := []string{"-D", cfg.DataDir, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C"}
	if !cfg.Durable {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(cfg.BinDir, exe("initdb")), args...)
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
		"unix_socket_directories": socketDirSetting(s.sockDir),
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

	s.cmd = exec.Command(filepath.Join(s.cfg.BinDir, exe("postgres")), args...)
	s.cmd.Dir = os.TempDir()
	s.cmd.Stdout = logFile
	s.cmd.Stderr = logFile
	s.cmd.SysProcAttr = procAttr(owner)
	s.cmd.Env = owner.env()
	s.exited = make(chan struct{})

	// Linux's parent-death signal fires when the *thread* that forked
	// exits; fork from a thread that lives as long as the server.
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
			// Ready only when the server that answered is ours: its
			// postmaster.pid names our process.
			if pid, _, ok := PIDFile(s.cfg.DataDir); ok && pid == s.cmd.Process.Pid {
				return nil
			}
			err = errors.New("another server answered on the port")
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
	s.signal("INT")
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
	s.signal("QUIT")
	select {
	case <-s.exited:
		return
	case <-time.After(5 * time.Second):
	}
	s.killGroup()
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
	home     string // the user's, when switching to it
}

// env is the environment the server runs in: the caller's, with HOME the
// server user's when it switches to one (libpq in the server, as Citus
// uses it between nodes, reads ~/.postgresql; root's is not readable).
func (o osUser) env() []string {
	if !o.switchTo || o.home == "" {
		return nil
	}
	return append(os.Environ(), "HOME="+o.home)
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

// StopOrphan stops, with an immediate shutdown, a server left running on
// dataDir by a caller that died without stopping it. On Linux the
// parent-death signal makes that rare; on other systems it is how a
// killed test binary's server goes away.
func StopOrphan(ctx context.Context, dataDir string) error {
	bin, err := FindBinDir()
	if err != nil {
		return err
	}
	owner, err := serverUser()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, exe("pg_ctl")), "stop", "-D", dataDir, "-m", "immediate", "-w")
	cmd.Dir = os.TempDir()
	cmd.SysProcAttr = owner.attr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("stop the orphaned server on %s: %w\n%s", dataDir, err, out)
	}
	return nil
}
