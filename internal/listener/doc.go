// Package listener will own the daemon's dedicated LISTEN connection on
// ff_completion, ff_lease and ff_ready, its reconnects, and the sweep it
// triggers after each (re)connect (SPEC section 11). Built by the daemon
// issue.
package listener
