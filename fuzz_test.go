package ffd_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/internal/testdb"
)

// typed reports whether err is one of the public typed errors.
func typed(err error) bool {
	for _, s := range []error{ffd.ErrValidation, ffd.ErrNotFound, ffd.ErrConflict, ffd.ErrStaleRevision, ffd.ErrLeaseLost, ffd.ErrAlreadyTerminal} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// FuzzPublicInputs throws arbitrary parameters at Create, SubmitFlow and
// StageEdge: every refusal must be a typed error and must write nothing.
// The seed corpus (testdata/fuzz/FuzzPublicInputs and the f.Add calls)
// runs under go test; `go test -fuzz FuzzPublicInputs -run '^$' .`
// explores further.
func FuzzPublicInputs(f *testing.F) {
	f.Add("lane", "kind", "key", "tag", "value", []byte("{}"), 1.5, 0.1, 0, 3, int64(0), int64(0), "a", "b")
	f.Add("", "", "", "", "", []byte(nil), 0.0, 0.0, 0, 0, int64(0), int64(0), "", "")
	f.Add("l\x00", "k\x00", "i\x00", "t\x00", "v\x00", []byte{0}, math.NaN(), math.NaN(), -1, -1, int64(-1), int64(-1), "x", "x")
	f.Add("ok", "\xff", "\xfe", "\xff", "\xff", []byte("x"), math.Inf(1), 2.0, 1<<40, 1<<20, int64(math.MaxInt64), int64(math.MinInt64), "n1", "n2")
	f.Add("ok.lane", "kind", "", "k", "v", []byte("p"), 2.0, 0.5, 7, 1001, int64(time.Hour), int64(25*time.Hour), "same", "same")

	db := testdb.New(f)
	client, err := ffd.NewClient(db.Pool, nil)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	rows := func(t *testing.T) int64 {
		var n int64
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_flow)
			+ (SELECT count(*) FROM ff_edge) + (SELECT count(*) FROM ff_edge_group)
			+ (SELECT count(*) FROM ff_completion_event) + (SELECT count(*) FROM ff_lease_event)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	check := func(t *testing.T, what string, before int64, err error) {
		t.Helper()
		if err == nil {
			return
		}
		if !typed(err) {
			t.Fatalf("%s: untyped error %T: %v", what, err, err)
		}
		if after := rows(t); after != before {
			t.Fatalf("%s: refused (%v) but wrote %d rows", what, err, after-before)
		}
	}
	f.Fuzz(func(t *testing.T, lane, kind, key, tagKey, tagValue string, payload []byte, mult, jitter float64,
		priority, maxAttempts int, ttl, delay int64, ref1, ref2 string) {
		p := ffd.CreateParams{Lane: lane, Kind: kind, IdempotencyKey: key, Payload: payload, Priority: priority,
			MaxAttempts: maxAttempts, LeaseTTL: time.Duration(ttl), Delay: time.Duration(delay),
			Retry: ffd.RetryPolicy{Multiplier: mult, Jitter: jitter}, Tags: map[string]any{tagKey: tagValue}}
		before := rows(t)
		_, err := client.Create(ctx, p)
		check(t, "Create", before, err)

		p.IdempotencyKey = ""
		before = rows(t)
		sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
			Flow:  ffd.CreateFlowParams{Kind: kind},
			Nodes: []ffd.SubmitNode{{Ref: ref1, Params: p}, {Ref: ref2, Params: ffd.CreateParams{Lane: "fuzz"}}},
			Edges: []ffd.SubmitEdge{{From: ref1, To: ref2}},
		})
		check(t, "SubmitFlow", before, err)
		if err != nil {
			return
		}
		before = rows(t)
		_, err = client.StageEdge(ctx, ffd.StageEdgeParams{FlowID: sub.Flow.ID, Upstream: sub.Executions[ref2].ID,
			Downstream: sub.Executions[ref1].ID, ExpectedRevision: sub.Flow.GraphRevision, DependencyKind: kind, DataPassingRef: tagValue})
		check(t, "StageEdge", before, err)
	})
}
