package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd/internal/session"
	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A transaction whose context ends (its deadline, a cancel) is rolled
// back and its connection given back to the pool, not closed: under
// load, closing it cost the server a new session for each transaction
// that ran out of time. Whether the context ends between statements or
// during one (stopped by a cancel request, as ffd's pools are set), the
// next transaction runs on the same session, and nothing of the cut one
// was kept.
func TestTxCutByItsContextKeepsItsConnection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cut  func(ctx context.Context, cancel context.CancelFunc, tx pgx.Tx) error
	}{
		{"between statements", func(ctx context.Context, cancel context.CancelFunc, _ pgx.Tx) error {
			cancel()
			return ctx.Err()
		}},
		{"during a statement", func(ctx context.Context, cancel context.CancelFunc, tx pgx.Tx) error {
			time.AfterFunc(100*time.Millisecond, cancel)
			_, err := tx.Exec(ctx, `SELECT pg_sleep(60)`)
			return err
		}},
	} {
		for _, inTx := range []struct {
			name string
			run  func(context.Context, store.DB, func(pgx.Tx) error) error
		}{{"InTx", store.InTx}, {"InTxOnce", store.InTxOnce}} {
			t.Run(inTx.name+" "+tc.name, func(t *testing.T) {
				t.Parallel()
				testTxCut(t, inTx.run, tc.cut)
			})
		}
	}
}

// testTxCut cuts a transaction run by inTx as cut says, and checks that
// its connection was kept and nothing of it was.
func testTxCut(t *testing.T, inTx func(context.Context, store.DB, func(pgx.Tx) error) error,
	cut func(ctx context.Context, cancel context.CancelFunc, tx pgx.Tx) error) {
	db := testdb.New(t)
	ctx, done := context.WithTimeout(context.Background(), 2*time.Minute)
	defer done()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	session.KeepOnCancel(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	pid := func() (p int32) {
		if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	before := pid()
	if _, err := pool.Exec(ctx, `CREATE TABLE cut (n int)`); err != nil {
		t.Fatal(err)
	}
	txCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	err = inTx(txCtx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(txCtx, `INSERT INTO cut VALUES (1)`); err != nil {
			return err
		}
		return cut(txCtx, cancel, tx)
	})
	if err == nil {
		t.Fatal("the cut transaction returned no error")
	}
	if after := pid(); after != before {
		t.Fatalf("the next statement ran on session %d, want %d (the cut transaction's connection was closed: %v)", after, before, err)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM cut`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of the cut transaction kept (%v), want 0", n, err)
	}
	if !errors.Is(err, context.Canceled) && !pgErrCanceled(err) {
		t.Fatalf("the cut transaction failed with %v, want its context's end", err)
	}
}

// pgErrCanceled says err is the server's answer to a cancel request.
func pgErrCanceled(err error) bool {
	var pe interface{ SQLState() string }
	return errors.As(err, &pe) && pe.SQLState() == "57014"
}
