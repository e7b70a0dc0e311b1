package ffd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
)

// A statement whose context ends is stopped by a cancel request and its
// connection kept, on a pool ffd configures: the next statement runs on
// the same session, and nothing of the first runs on. pgx's default
// closes the connection instead, and the next statement opens a new
// session (on Citus a costly one).
func TestTimedOutStatementKeepsItsSession(t *testing.T) {
	t.Parallel()
	f := setup(t)
	for _, tc := range []struct {
		name      string
		configure bool
		kept      bool
	}{
		{"ffd's pool", true, true},
		{"pgx's default", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pgxpool.ParseConfig(f.DB.URL)
			if err != nil {
				t.Fatal(err)
			}
			cfg.MaxConns = 1
			if tc.configure {
				if err := ffd.ConfigurePool(cfg, nil); err != nil {
					t.Fatal(err)
				}
			}
			pool, err := pgxpool.NewWithConfig(f.Ctx, cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			pid := func() (p int32) {
				t.Helper()
				if err := pool.QueryRow(f.Ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
					t.Fatal(err)
				}
				return p
			}
			before := pid()
			ctx, cancel := context.WithTimeout(f.Ctx, 200*time.Millisecond)
			_, err = pool.Exec(ctx, `SELECT pg_sleep(60)`)
			cancel()
			if err == nil || !errors.Is(err, context.DeadlineExceeded) && !isCanceled(err) {
				t.Fatalf("a 60 s sleep under a 200 ms deadline: %v; want it stopped", err)
			}
			after := pid()
			if kept := after == before; kept != tc.kept {
				t.Fatalf("session %d before the timed-out statement, %d after: kept %v, want %v", before, after, kept, tc.kept)
			}
			if n := f.Count(`SELECT count(*) FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(60)' AND state = 'active' AND datname = current_database()`); n != 0 {
				t.Fatalf("%d sessions still run the timed-out statement, want 0", n)
			}
		})
	}
}

// isCanceled reports the server's "canceling statement due to user
// request" (SQLSTATE 57014).
func isCanceled(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "57014"
}
