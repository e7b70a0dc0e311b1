//go:build unix

package pgserver

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// signal sends the server one of the signals its shutdown modes use:
// "INT" (fast) or "QUIT" (immediate).
func (s *Server) signal(name string) {
	sig := map[string]syscall.Signal{"INT": syscall.SIGINT, "QUIT": syscall.SIGQUIT}[name]
	_ = s.cmd.Process.Signal(sig)
}

// killGroup kills the server and every process it started.
func (s *Server) killGroup() { _ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL) }

// Alive reports whether a process with this pid exists.
func Alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// serverUser is the caller, or the postgres OS user when the caller is
// root: Postgres refuses to run as root.
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
	return osUser{switchTo: true, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir}, nil
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

// socketDirSetting is unix_socket_directories: the cluster's own
// directory, so that clusters never collide on the default socket.
func socketDirSetting(dir string) string { return dir }

// attr runs a program (initdb) as o.
func (o osUser) attr() *syscall.SysProcAttr {
	if !o.switchTo {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: o.uid, Gid: o.gid}}
}
