//go:build !linux

package bench

import "syscall"

// childAttr: without a parent-death signal, a bench killed outright
// leaves its children to notice their database closing.
func childAttr() *syscall.SysProcAttr { return nil }
