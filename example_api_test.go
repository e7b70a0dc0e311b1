package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flowfabric/ffd"
)

// exampleClient is the setup every example below shares: a pool on
// FFD_DATABASE_URL and a client over it.
func exampleClient(ctx context.Context) (*pgxpool.Pool, *ffd.Client) {
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	client, err := ffd.NewClient(pool, nil)
	if err != nil {
		panic(err)
	}
	return pool, client
}

// Enqueue many executions in one statement: every row is checked before
// anything is written.
func ExampleClient_CreateMany() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	batch := make([]ffd.CreateParams, 3)
	for i := range batch {
		batch[i] = ffd.CreateParams{Lane: "example-many", JSON: map[string]int{"page": i}}
	}
	xs, err := client.CreateMany(ctx, batch)
	if err != nil {
		panic(err)
	}
	fmt.Println(len(xs), xs[0].State, string(xs[2].Payload))

	_, err = client.CreateMany(ctx, []ffd.CreateParams{{Lane: "example-many"}, {Lane: "no spaces"}})
	var invalid *ffd.ValidationError
	fmt.Println(errors.As(err, &invalid), invalid.Field)
	// Output:
	// 3 pending {"page":2}
	// true lane
}

// Without a Worker: claim under a lease, then complete quoting the lease's
// epoch, the fencing token. A holder whose lease moved on is refused.
func ExampleClient_Claim() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	if _, err := client.Create(ctx, ffd.CreateParams{Lane: "example-claim"}); err != nil {
		panic(err)
	}
	xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: "example-claim", Worker: "example/1", Max: 10})
	if err != nil {
		panic(err)
	}
	x := xs[0]
	fmt.Println(len(xs), x.State, x.Attempt)

	_, err = client.Complete(ctx, x.ID, x.LeaseEpoch+1, nil) // not our epoch
	fmt.Println(errors.Is(err, ffd.ErrLeaseLost))

	done, err := client.Complete(ctx, x.ID, x.LeaseEpoch, []byte(`"ok"`))
	if err != nil {
		panic(err)
	}
	fmt.Println(done.State, string(done.Result))
	// Output:
	// 1 running 1
	// true
	// completed "ok"
}

// A failed attempt is retried after backoff while attempts remain; a
// permanent failure ends the execution at once.
func ExampleClient_Fail() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	if _, err := client.Create(ctx, ffd.CreateParams{Lane: "example-fail", MaxAttempts: 3}); err != nil {
		panic(err)
	}
	xs, err := client.Claim(ctx, ffd.ClaimParams{Lane: "example-fail", Worker: "example/1"})
	if err != nil {
		panic(err)
	}
	retried, err := client.Fail(ctx, xs[0].ID, xs[0].LeaseEpoch, ffd.FailParams{Error: "timeout talking to the bank", Retryable: true})
	if err != nil {
		panic(err)
	}
	fmt.Println(retried.State, retried.RunAt.After(xs[0].RunAt))
	// Output: pending true
}

// Cancel an execution that has not finished; cancelling it again reports
// the cancellation already made.
func ExampleClient_Cancel() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	res, err := client.Create(ctx, ffd.CreateParams{Lane: "example-cancel"})
	if err != nil {
		panic(err)
	}
	first, err := client.Cancel(ctx, res.Execution.ID, "customer withdrew", "support")
	if err != nil {
		panic(err)
	}
	again, err := client.Cancel(ctx, res.Execution.ID, "customer withdrew", "support")
	if err != nil {
		panic(err)
	}
	x, _ := client.Get(ctx, res.Execution.ID)
	fmt.Println(first.State, again.Repeated, x.CancellationReason)
	// Output: cancelled true customer withdrew
}

// List pages through executions in creation order; Next is the cursor.
func ExampleClient_List() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	for range 3 {
		if _, err := client.Create(ctx, ffd.CreateParams{Lane: "example-list"}); err != nil {
			panic(err)
		}
	}
	page, err := client.List(ctx, ffd.ListParams{Lane: "example-list", Limit: 2})
	if err != nil {
		panic(err)
	}
	rest, err := client.List(ctx, ffd.ListParams{Lane: "example-list", Limit: 2, After: page.Next})
	if err != nil {
		panic(err)
	}
	fmt.Println(len(page.Executions), len(rest.Executions), rest.Next == nil)
	// Output: 2 1 true
}

// A DAG in one call: the root is claimable at once, its downstream waits
// blocked on its edge group.
func ExampleClient_SubmitFlow() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Flow: ffd.CreateFlowParams{Kind: "order"},
		Nodes: []ffd.SubmitNode{
			{Ref: "charge", Params: ffd.CreateParams{Lane: "example-flow"}},
			{Ref: "email", Params: ffd.CreateParams{Lane: "example-flow"}},
			{Ref: "ship", Params: ffd.CreateParams{Lane: "example-flow"}},
		},
		Edges: []ffd.SubmitEdge{{From: "charge", To: "ship"}, {From: "email", To: "ship"}},
	})
	if err != nil {
		panic(err)
	}
	charge, _ := client.Get(ctx, sub.Executions["charge"].ID)
	ship, _ := client.Get(ctx, sub.Executions["ship"].ID)
	flow, err := client.DescribeFlow(ctx, sub.Flow.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(flow.NodeCount, flow.EdgeCount, charge.State, ship.State, ship.Step)
	fmt.Println(flow.Groups[0].Policy.Kind, flow.Groups[0].Counts.Total, flow.Groups[0].Unsatisfied())
	// Output:
	// 3 2 pending blocked ship
	// all_of 2 2
}

// Any-of with cancel_remaining: the first upstream to succeed satisfies
// the join, and the daemon cancels the others.
func ExampleClient_SetEdgeGroupPolicy() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	flow, err := client.CreateFlow(ctx, ffd.CreateFlowParams{Kind: "race"})
	if err != nil {
		panic(err)
	}
	fast, _ := client.CreateInFlow(ctx, flow.Flow.ID, ffd.CreateParams{Lane: "example-race", Step: "mirror-a"})
	slow, _ := client.CreateInFlow(ctx, flow.Flow.ID, ffd.CreateParams{Lane: "example-race", Step: "mirror-b"})
	use, _ := client.CreateInFlow(ctx, flow.Flow.ID, ffd.CreateParams{Lane: "example-race", Step: "use"})
	if _, err := client.SetEdgeGroupPolicy(ctx, flow.Flow.ID, use.Execution.ID,
		ffd.Policy{Kind: ffd.AnyOf, OnSatisfied: ffd.CancelRemaining}); err != nil {
		panic(err)
	}
	now, err := client.DescribeFlow(ctx, flow.Flow.ID) // adding members moved the revision on
	if err != nil {
		panic(err)
	}
	revision := now.GraphRevision
	for _, up := range []*ffd.CreateResult{fast, slow} {
		staged, err := client.StageEdge(ctx, ffd.StageEdgeParams{FlowID: flow.Flow.ID, Upstream: up.Execution.ID,
			Downstream: use.Execution.ID, ExpectedRevision: revision})
		if err != nil {
			panic(err)
		}
		revision = staged.NewRevision
		applied, err := client.ApplyEdge(ctx, flow.Flow.ID, staged.Edge.ID)
		if err != nil {
			panic(err)
		}
		fmt.Println(applied.Group.Policy.Kind, applied.Group.Counts.Total, applied.Unsatisfied)
	}
	// Output:
	// any_of 1 1
	// any_of 2 1
}

// Cancel a flow and its members that have not finished.
func ExampleClient_CancelFlow() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "a", Params: ffd.CreateParams{Lane: "example-cancel-flow"}},
			{Ref: "b", Params: ffd.CreateParams{Lane: "example-cancel-flow"}},
		},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		panic(err)
	}
	res, err := client.CancelFlow(ctx, sub.Flow.ID, ffd.CancelAll, "order withdrawn")
	if err != nil {
		panic(err)
	}
	flow, _ := client.DescribeFlow(ctx, sub.Flow.ID)
	b, _ := client.Get(ctx, sub.Executions["b"].ID)
	fmt.Println(res.Policy, len(res.Members), flow.State, b.State)
	// Output: cancel_all 2 cancelled cancelled
}

// Rerun a failed execution: a new execution with the same parameters,
// linked to the one it reruns.
func ExampleClient_RerunExecution() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	res, err := client.Create(ctx, ffd.CreateParams{Lane: "example-rerun", MaxAttempts: 1, JSON: map[string]string{"to": "ada"}})
	if err != nil {
		panic(err)
	}
	xs, _ := client.Claim(ctx, ffd.ClaimParams{Lane: "example-rerun", Worker: "example/1"})
	if _, err := client.Fail(ctx, xs[0].ID, xs[0].LeaseEpoch, ffd.FailParams{Error: "smtp down", Retryable: true}); err != nil {
		panic(err)
	}
	again, err := client.RerunExecution(ctx, res.Execution.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(again.State, *again.RerunOf == res.Execution.ID.UUID, string(again.Payload))
	// Output: pending true {"to":"ada"}
}

// Pause a lane: no worker claims from it until it is resumed; executions
// already running finish.
func ExampleClient_PauseLane() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	if _, err := client.Create(ctx, ffd.CreateParams{Lane: "example-paused"}); err != nil {
		panic(err)
	}
	if _, err := client.PauseLane(ctx, "example-paused"); err != nil {
		panic(err)
	}
	xs, _ := client.Claim(ctx, ffd.ClaimParams{Lane: "example-paused", Worker: "example/1"})
	fmt.Println(len(xs))
	lane, err := client.ResumeLane(ctx, "example-paused")
	if err != nil {
		panic(err)
	}
	xs, _ = client.Claim(ctx, ffd.ClaimParams{Lane: "example-paused", Worker: "example/1"})
	fmt.Println(lane.Paused, len(xs))
	// Output:
	// 0
	// false 1
}

// Read the completion outbox by cursor, as any consumer in any language
// can: every terminal outcome is an event.
func ExampleClient_ReadEvents() {
	ctx := context.Background()
	pool, client := exampleClient(ctx)
	defer pool.Close()

	// Start after every event already there.
	var after ffd.OutboxCursor
	for {
		page, err := client.ReadEvents(ctx, ffd.StreamCompletion, after, 1000)
		if err != nil {
			panic(err)
		}
		if len(page) == 0 {
			break
		}
		after = page[len(page)-1].Position()
	}
	res, err := client.Create(ctx, ffd.CreateParams{Lane: "example-events"})
	if err != nil {
		panic(err)
	}
	if _, err := client.Cancel(ctx, res.Execution.ID, "not needed", "example"); err != nil {
		panic(err)
	}
	events, err := client.ReadEvents(ctx, ffd.StreamCompletion, after, 10)
	if err != nil {
		panic(err)
	}
	for _, e := range events {
		if e.ExecutionID == res.Execution.ID.String() {
			fmt.Println(e.Outcome)
		}
	}
	// Output: cancelled
}

// Execution ids on the wire read {fp:N}:<uuid>; anything else is a
// ValidationError that quotes it.
func ExampleParseExecutionID() {
	id, err := ffd.ParseExecutionID("{fp:24}:550e8400-e29b-41d4-a716-446655440000")
	if err != nil {
		panic(err)
	}
	fmt.Println(id.Partition, id.UUID)

	_, err = ffd.ParseExecutionID("550e8400-e29b-41d4-a716-446655440000")
	var invalid *ffd.ValidationError
	fmt.Println(errors.As(err, &invalid), invalid.Kind)
	// Output:
	// 24 550e8400-e29b-41d4-a716-446655440000
	// true malformed_id
}
