//go:build unix && !linux

package pgserver

import "syscall"

// procAttr starts the server as o, in a process group of its own. These
// systems have no parent-death signal: a caller killed outright leaves
// its server running until the next Start on the same data directory
// (which finds the postmaster.pid) or a manual stop; the test harness
// removes stale clusters whose owner is gone on its next run.
func procAttr(o osUser) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	if u := o.attr(); u != nil {
		attr.Credential = u.Credential
	}
	return attr
}

// DiesWithParent is true where a server started by Start ends when its
// caller dies, however it dies.
const DiesWithParent = false
