package bench

import "syscall"

// childAttr makes a bench child die with the bench: a bench killed
// outright takes its processes with it.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
