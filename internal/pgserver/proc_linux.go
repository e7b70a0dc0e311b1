package pgserver

import "syscall"

// procAttr starts the server as o, in a process group of its own (so a
// terminal's Ctrl-C reaches only its owner, who decides how it stops),
// and asks Linux to send it SIGQUIT (immediate shutdown) when the thread
// that forked it exits: a crashed caller leaves no server behind.
func procAttr(o osUser) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGQUIT}
	if u := o.attr(); u != nil {
		attr.Credential = u.Credential
	}
	return attr
}

// DiesWithParent is true where a server started by Start ends when its
// caller dies, however it dies.
const DiesWithParent = true
