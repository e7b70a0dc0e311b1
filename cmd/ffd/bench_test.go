package main

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

func TestWithDatabase(t *testing.T) {
	t.Parallel()
	tests := []struct{ conn, want string }{
		{"postgres://u:p@127.0.0.1:5432/ffd?sslmode=disable", "postgres://u:p@127.0.0.1:5432/other?sslmode=disable"},
		{"postgresql://h/ffd", "postgresql://h/other"},
		{"host=h dbname=ffd user=u", "host=h dbname=ffd user=u dbname=other"},
	}
	for _, tt := range tests {
		got := withDatabase(tt.conn, "other")
		if got != tt.want {
			t.Errorf("withDatabase(%q) = %q, want %q", tt.conn, got, tt.want)
		}
		// What counts is what the driver connects to.
		cfg, err := pgconn.ParseConfig(got)
		if err != nil {
			t.Errorf("parse %q: %v", got, err)
			continue
		}
		if cfg.Database != "other" {
			t.Errorf("%q connects to database %q, want other", got, cfg.Database)
		}
	}
}
