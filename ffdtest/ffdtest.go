// Package ffdtest is the test kit for applications built on ffd: a
// migrated database per test, assertions about what the code under test
// enqueued, and a way to run a flow to its end in-process.
//
// A test package that uses it declares
//
//	func TestMain(m *testing.M) { ffdtest.Main(m) }
//
// Each test then calls New for a database of its own. The databases live
// on a private PostgreSQL server started from the local server binaries
// once per test binary (stopped when the tests end), or, when
// FFD_TEST_DATABASE_URL is set, on that server (its user must be allowed
// to create databases). Either way each database is cloned from a
// migrated template, so tests run in parallel and never see each other's
// rows or notifications.
package ffdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

// EnvDatabaseURL selects an existing server instead of a private one.
const EnvDatabaseURL = testdb.EnvURL

// DefaultTimeout bounds RunFlow.
const DefaultTimeout = time.Minute

// Main runs a test binary's tests and then stops the private server and
// removes its files, whatever the tests' outcome. Call it from TestMain.
func Main(m *testing.M) { testdb.Main(m) }

// DB is one test's database.
type DB struct {
	// URL connects to it, for code under test that opens its own pool.
	URL string
	// Pool is a pool on it, closed when the test ends.
	Pool *pgxpool.Pool
	// Client is a quiet client on Pool.
	Client *ffd.Client
}

// New gives t a database of its own, migrated to this build's schema and
// dropped when the test ends.
func New(t testing.TB) *DB {
	t.Helper()
	db := testdb.New(t)
	client, err := ffd.NewClient(db.Pool, &ffd.Config{Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("ffdtest: client: %v", err)
	}
	return &DB{URL: db.URL, Pool: db.Pool, Client: client}
}

// Want describes executions an assertion looks for. Zero fields match
// anything.
type Want struct {
	Namespace string
	Lane      string
	Kind      string
	State     ffd.State
	// Payload, when set, must be a subset of the execution's JSON payload:
	// every key given, with an equal JSON value.
	Payload map[string]any
}

// Enqueued returns the executions matching want, in creation order.
func (db *DB) Enqueued(t testing.TB, want Want) []*ffd.Execution {
	t.Helper()
	return db.enqueued(t, nil, want)
}

// EnqueuedTx is Enqueued as tx sees it: what the code under test
// enqueued inside its transaction, before (or without) a commit.
func (db *DB) EnqueuedTx(t testing.TB, tx pgx.Tx, want Want) []*ffd.Execution {
	t.Helper()
	return db.enqueued(t, tx, want)
}

// RequireEnqueued fails the test unless exactly n executions match want,
// and returns them.
func (db *DB) RequireEnqueued(t testing.TB, want Want, n int) []*ffd.Execution {
	t.Helper()
	return require(t, db.enqueued(t, nil, want), want, n)
}

// RequireEnqueuedTx is RequireEnqueued as tx sees it.
func (db *DB) RequireEnqueuedTx(t testing.TB, tx pgx.Tx, want Want, n int) []*ffd.Execution {
	t.Helper()
	return require(t, db.enqueued(t, tx, want), want, n)
}

func require(t testing.TB, found []*ffd.Execution, want Want, n int) []*ffd.Execution {
	t.Helper()
	if len(found) != n {
		t.Fatalf("ffdtest: %d executions match %+v, want %d%s", len(found), want, n, describe(found))
	}
	return found
}

// enqueued pages through the executions matching want's columns (on tx
// when set) and keeps those whose payload matches.
func (db *DB) enqueued(t testing.TB, tx pgx.Tx, want Want) []*ffd.Execution {
	t.Helper()
	ctx := context.Background()
	p := ffd.ListParams{Namespace: want.Namespace, Lane: want.Lane, Kind: want.Kind, State: want.State, Limit: 1000}
	var found []*ffd.Execution
	for {
		var page *ffd.ListPage
		var err error
		if tx != nil {
			page, err = db.Client.ListTx(ctx, tx, p)
		} else {
			page, err = db.Client.List(ctx, p)
		}
		if err != nil {
			t.Fatalf("ffdtest: list executions: %v", err)
		}
		for _, x := range page.Executions {
			if payloadHas(x.Payload, want.Payload) {
				found = append(found, x)
			}
		}
		if page.Next == nil {
			return found
		}
		p.After = page.Next
	}
}

// payloadHas reports whether the JSON payload holds every key of want
// with an equal value (compared as JSON).
func payloadHas(payload []byte, want map[string]any) bool {
	if len(want) == 0 {
		return true
	}
	var got map[string]any
	if json.Unmarshal(payload, &got) != nil {
		return false
	}
	for k, v := range want {
		wv, err := json.Marshal(v)
		if err != nil {
			return false
		}
		var norm any
		if json.Unmarshal(wv, &norm) != nil || !reflect.DeepEqual(got[k], norm) {
			return false
		}
	}
	return true
}

func describe(xs []*ffd.Execution) string {
	s := ""
	for i, x := range xs {
		if i == 5 {
			return s + fmt.Sprintf("\n  ... and %d more", len(xs)-5)
		}
		s += fmt.Sprintf("\n  %s kind %q lane %s state %s payload %s", x.ID, x.Kind, x.Lane, x.State, x.Payload)
	}
	return s
}
