// Package cascade will dispatch completion events: resolve outgoing edges,
// decide join groups, skip what can no longer run and cancel losing
// siblings, exactly once (SPEC sections 7 and 8). Built by the cascade
// issue.
package cascade
