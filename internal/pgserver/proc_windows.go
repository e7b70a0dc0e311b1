package pgserver

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// procAttr starts the server in a process group of its own, so that a
// console's Ctrl-C reaches only its owner. Windows has no parent-death
// signal and no user switch here: run ffd as a user without
// administrative rights (PostgreSQL refuses to run as an administrator).
func procAttr(osUser) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{CreationFlags: syscall.CREATE_NEW_PROCESS_GROUP}
}

// signal sends the server a shutdown signal the way PostgreSQL does on
// Windows, through pg_ctl kill (the server emulates signals over a named
// pipe): "INT" (fast) or "QUIT" (immediate).
func (s *Server) signal(name string) {
	_ = exec.Command(filepath.Join(s.cfg.BinDir, exe("pg_ctl")), "kill", name, strconv.Itoa(s.cmd.Process.Pid)).Run()
}

// killGroup kills the server; its children exit when the postmaster does.
func (s *Server) killGroup() { _ = s.cmd.Process.Kill() }

// Alive reports whether a process with this pid exists.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid) // opens a handle: fails when there is no such process
	if err != nil {
		return false
	}
	_ = p.Release()
	return true
}

// serverUser is always the caller on Windows.
func serverUser() (osUser, error) { return osUser{}, nil }

// chown has nothing to do: the server runs as the caller.
func (osUser) chown(string) error { return nil }

// socketDirSetting disables Unix sockets: the cluster listens on TCP only.
func socketDirSetting(string) string { return "" }

// attr runs a program (initdb) as the caller.
func (osUser) attr() *syscall.SysProcAttr { return nil }

// DiesWithParent is true where a server started by Start ends when its
// caller dies, however it dies.
const DiesWithParent = false
