package testdb

import "syscall"

// bouncerAttr makes pgbouncer die with the test binary.
func bouncerAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
