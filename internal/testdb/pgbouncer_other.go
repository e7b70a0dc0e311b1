//go:build !linux

package testdb

import "syscall"

// bouncerAttr: no parent-death signal here; the test's cleanup stops it.
func bouncerAttr() *syscall.SysProcAttr { return nil }
