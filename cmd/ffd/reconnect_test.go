package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/testdb"
)

// events tail --consumer --follow outlives its backends being terminated
// (what a Postgres crash restart does to it) and prints every event once
// it is back, resuming from its acknowledged cursor.
func TestEventsTailFollowReconnects(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncWriter{w: &bytes.Buffer{}}
	done := make(chan int, 1)
	u, _ := url.Parse(db.URL)
	q := u.Query()
	q.Set("application_name", "tail-under-fire")
	u.RawQuery = q.Encode()
	go func() {
		done <- run(ctx, []string{"events", "tail", "--follow", "--stream", "completion", "--consumer", "fire",
			"--poll-interval", "50ms", "--database-url", u.String(), "--log-format", "json"}, out, io.Discard)
	}()
	insert := func(n int) {
		for range n {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome)
				VALUES (1, gen_random_uuid(), 'success')`); err != nil {
				t.Fatal(err)
			}
		}
	}
	// distinct counts the events printed, by id: a batch printed just
	// before its backend was killed, and so never acknowledged, is printed
	// again after the reconnect (at-least-once, docs/consumers.md), so
	// lines alone would count it twice.
	distinct := func() map[float64]bool {
		out.mu.Lock()
		defer out.mu.Unlock()
		ids := map[float64]bool{}
		for _, l := range strings.Split(strings.TrimSpace(out.w.String()), "\n") {
			var e map[string]any
			if l == "" {
				continue
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("line %q: %v", l, err)
			}
			ids[e["event_id"].(float64)] = true
		}
		return ids
	}
	lines := func() int { return len(distinct()) }
	waitLines := func(n int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); lines() < n; {
			select {
			case code := <-done:
				t.Fatalf("tail exited %d with %d of %d lines", code, lines(), n)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("tail printed %d lines, want %d", lines(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	insert(5)
	waitLines(5)
	for round := 1; round <= 3; round++ {
		var killed int
		if err := db.Pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = 'tail-under-fire'`).Scan(&killed); err != nil || killed == 0 {
			t.Fatalf("terminated %d tail backends (%v)", killed, err)
		}
		insert(5)
		waitLines(5 + 5*round)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail exited %d after cancel", code)
	}
	ids := distinct()
	if len(ids) != 20 {
		t.Fatalf("%d distinct events printed, want 20:\n%s", len(ids), out.w.String())
	}
}

// events tail --wal --follow stops at once, saying why, on errors that a
// retry cannot fix: a role without REPLICATION, and a slot that belongs to
// another database.
func TestEventsTailWALPermanentErrors(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	ctx := context.Background()
	role := "norepl_" + strings.ToLower(db.Name)
	if _, err := db.Pool.Exec(ctx, fmt.Sprintf(`CREATE ROLE %s LOGIN NOREPLICATION`, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) }) //nolint:errcheck
	u, _ := url.Parse(db.URL)
	u.User = url.User(role)
	other := testdb.New(t)
	slot := "other_" + strings.ToLower(other.Name)
	if _, err := other.Pool.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Pool.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, slot) }) //nolint:errcheck
	for _, c := range []struct {
		name, url, slot, want string
	}{
		{"no REPLICATION", u.String(), "mine_" + strings.ToLower(db.Name), "replication"},
		{"slot of another database", db.URL, slot, "database"},
	} {
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var errOut bytes.Buffer
		code := run(tctx, []string{"events", "tail", "--wal", "--slot", c.slot, "--follow", "--database-url", c.url, "--log-format", "json"}, io.Discard, &errOut)
		expired := tctx.Err() != nil
		cancel()
		if expired || code == 0 || !strings.Contains(strings.ToLower(errOut.String()), c.want) {
			t.Errorf("%s: exit %d (retried until the timeout: %v), stderr %q; want a prompt exit naming %q", c.name, code, expired, errOut.String(), c.want)
		}
	}
}

// events tail --consumer --follow started while the database hangs (a
// crash restart in progress) waits for it, as it does once running, and
// prints the events once the database answers; without --follow it fails
// at once.
func TestEventsTailFollowWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	db := testdb.New(t)
	proxy := testdb.NewProxy(t, db)
	proxy.Freeze()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	args := []string{"events", "tail", "--stream", "completion", "--consumer", "late", "--poll-interval", "50ms",
		"--connect-timeout", "200ms", "--database-url", proxy.URL(db), "--log-format", "json"}
	var errOut bytes.Buffer
	if code := run(ctx, args, io.Discard, &errOut); code == 0 {
		t.Fatalf("a one-shot tail against a hung database exited 0")
	}
	out := &syncWriter{w: &bytes.Buffer{}}
	done := make(chan int, 1)
	go func() { done <- run(ctx, append(args, "--follow"), out, io.Discard) }()
	select {
	case code := <-done:
		t.Fatalf("tail --follow exited %d while the database hung", code)
	case <-time.After(time.Second):
	}
	proxy.Thaw()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO ff_completion_event (partition_key, execution_id, outcome)
		SELECT 1, gen_random_uuid(), 'success' FROM generate_series(1, 3)`); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; {
		out.mu.Lock()
		n := strings.Count(out.w.String(), "\n")
		out.mu.Unlock()
		if n == 3 {
			break
		}
		select {
		case code := <-done:
			t.Fatalf("tail --follow exited %d with %d of 3 events", code, n)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tail --follow printed %d of 3 events after the database came back", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("tail exited %d after cancel", code)
	}
}
