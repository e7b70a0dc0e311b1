// Command mixed runs one flow across three languages (docs/languages.md):
// a Go step, then a Python step (clients/python/examples/mixed_worker.py),
// then a TypeScript step (clients/typescript/examples/mixed-worker.ts),
// each handed the result of the one before and each failing its first
// attempt, so that every language's retry is seen. It runs the Go step's
// worker itself, submits the flow, waits for it and prints the last
// step's result; it exits non-zero unless the flow completed as it must.
//
// It reads FFD_DATABASE_URL; the daemon (ffd run --worker-api) and the
// two other workers must be running against the same database.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/flowfabric/ffd"
)

// Quote is what the Go step hands the Python step.
type Quote struct {
	Order  int      `json:"order"`
	Amount float64  `json:"amount"`
	By     []string `json:"by"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mixed:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, nil)
	if err != nil {
		return err
	}
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "quote", func(ctx context.Context, job *ffd.Job, in Quote) (Quote, error) {
		if job.Attempt == 1 {
			return Quote{}, errors.New("the pricing service blinked (the first attempt fails on purpose)")
		}
		return Quote{Order: in.Order, Amount: 20, By: []string{"go"}}, nil
	})
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"mixed.go"}, PollInterval: 100 * time.Millisecond, Kinds: kinds})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer w.Stop(context.Background()) //nolint:errcheck // exiting
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Flow: ffd.CreateFlowParams{Kind: "mixed"},
		Nodes: []ffd.SubmitNode{
			{Ref: "quote", Params: ffd.CreateParams{Lane: "mixed.go", Kind: "quote", JSON: Quote{Order: 7}, MaxAttempts: 3, Retry: fast}},
			{Ref: "score", Params: ffd.CreateParams{Lane: "mixed.py", Kind: "score", MaxAttempts: 3, Retry: fast}},
			{Ref: "notify", Params: ffd.CreateParams{Lane: "mixed.ts", Kind: "notify", MaxAttempts: 3, Retry: fast}},
		},
		Edges: []ffd.SubmitEdge{{From: "quote", To: "score"}, {From: "score", To: "notify"}},
	})
	if err != nil {
		return err
	}
	fmt.Println("submitted flow", sub.Flow.ID)
	return report(ctx, client, sub)
}

// fast retries after 100 ms, so that the example's retries are quick.
var fast = ffd.RetryPolicy{Base: 100 * time.Millisecond}

// report waits for the flow and checks what each language did.
func report(ctx context.Context, client *ffd.Client, sub *ffd.SubmittedFlow) error {
	for {
		f, err := client.DescribeFlow(ctx, sub.Flow.ID)
		if err != nil {
			return err
		}
		if f.State != ffd.FlowOpen {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("flow %s still open: %w (are the daemon and the Python and TypeScript workers running?)", sub.Flow.ID, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	last, err := client.Get(ctx, sub.Executions["notify"].ID)
	if err != nil {
		return err
	}
	var out struct {
		Order int      `json:"order"`
		Risk  float64  `json:"risk"`
		By    []string `json:"by"`
	}
	if last.State != ffd.StateCompleted || json.Unmarshal(last.Result, &out) != nil {
		return fmt.Errorf("the last step ended %s with %s", last.State, last.Result)
	}
	for step, x := range sub.Executions {
		got, err := client.Get(ctx, x.ID)
		if err != nil {
			return err
		}
		fmt.Printf("step %s: %s after %d attempts\n", step, got.State, got.Attempt)
		if got.Attempt != 2 {
			return fmt.Errorf("step %s took %d attempts, want 2 (one failure, one retry)", step, got.Attempt)
		}
	}
	if !slices.Equal(out.By, []string{"go", "python", "typescript"}) || out.Order != 7 {
		return fmt.Errorf("result %s: want order 7 handled by go, python and typescript in turn", last.Result)
	}
	fmt.Printf("result: %s\n", last.Result)
	return nil
}
