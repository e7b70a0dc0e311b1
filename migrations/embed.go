// Package migrations holds ffd's schema as versioned SQL files, embedded in
// the binary. internal/schema applies them.
//
// Files are named NNNNN_what.sql and use goose's annotations. Each file is
// applied in its own transaction. A released file is never edited: schema
// changes go in a new file.
package migrations

import "embed"

// FS holds every migration file.
//
//go:embed *.sql
var FS embed.FS
