package ffdtest_test

import (
	"context"
	"testing"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtest"
)

// The test binary's private server starts with the first test that asks
// for a database and stops when the tests end.
func TestMain(m *testing.M) { ffdtest.Main(m) }

// signUp is application code under test: it creates a user and enqueues
// their welcome mail in the same transaction.
func signUp(ctx context.Context, db *ffdtest.DB, email string) error {
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := db.Client.CreateTx(ctx, tx, ffd.CreateParams{
		Lane: "mail", Kind: "welcome", JSON: map[string]any{"to": email, "template": "welcome-v2"},
	}); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Asserting what the code under test enqueued: by lane, kind and payload
// fields.
func TestExampleRequireEnqueued(t *testing.T) {
	t.Parallel()
	db := ffdtest.New(t)
	if err := signUp(context.Background(), db, "ada@example.com"); err != nil {
		t.Fatal(err)
	}
	db.RequireEnqueued(t, ffdtest.Want{Lane: "mail", Kind: "welcome", Payload: map[string]any{"to": "ada@example.com"}}, 1)
	db.RequireEnqueued(t, ffdtest.Want{Kind: "welcome", Payload: map[string]any{"to": "bob@example.com"}}, 0)
}

// Running a whole flow in the test: the daemon and a worker run in
// process, and the test reads every step's final state.
func TestExampleRunFlow(t *testing.T) {
	t.Parallel()
	db := ffdtest.New(t)
	ctx := context.Background()
	sub, err := db.Client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "extract", Params: ffd.CreateParams{Lane: "etl", Kind: "extract"}},
			{Ref: "load", Params: ffd.CreateParams{Lane: "etl", Kind: "load"}},
		},
		Edges: []ffd.SubmitEdge{{From: "extract", To: "load"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "extract", func(context.Context, *ffd.Job, struct{}) ([]int, error) { return []int{1, 2, 3}, nil })
	ffd.Handle(kinds, "load", func(ctx context.Context, job *ffd.Job, _ struct{}) (int, error) {
		rows, err := ffd.UpstreamResults[[]int](ctx, job)
		return len(rows["extract"]), err
	})
	run := db.RunFlow(t, sub.Flow.ID, ffd.WorkerConfig{Kinds: kinds})
	if run.Flow.State != ffd.FlowCompleted || run.State("load") != ffd.StateCompleted || string(run.Steps["load"].Result) != "3" {
		t.Fatalf("flow %s, load %s with result %s; want completed, completed, 3", run.Flow.State, run.State("load"), run.Steps["load"].Result)
	}
}
