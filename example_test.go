package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// A producer enqueues an execution and a worker runs it.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("FFD_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, nil)
	if err != nil {
		panic(err)
	}

	created, err := client.Create(ctx, ffd.CreateParams{
		Lane: "greetings",
		JSON: map[string]string{"name": "Ada"},
	})
	if err != nil {
		panic(err)
	}

	done := make(chan struct{})
	worker, err := ffd.NewWorker(client, ffd.WorkerConfig{
		Lanes: []string{"greetings"},
		Handler: func(ctx context.Context, job *ffd.Job) ([]byte, error) {
			var in struct{ Name string }
			if err := job.UnmarshalPayload(&in); err != nil {
				return nil, ffd.Permanent(err)
			}
			defer close(done)
			return []byte("hello, " + in.Name), nil
		},
	})
	if err != nil {
		panic(err)
	}
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	<-done
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := worker.Stop(stopCtx); err != nil {
		panic(err)
	}

	x, err := client.Get(ctx, created.Execution.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(x.State, string(x.Result))
	// Output: completed hello, Ada
}

// Enqueue inside the application's own transaction: the execution exists
// exactly when the transaction commits.
func ExampleClient_CreateTx() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("FFD_DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, _ := ffd.NewClient(pool, nil)

	tx, err := pool.Begin(ctx)
	if err != nil {
		panic(err)
	}
	res, err := client.CreateTx(ctx, tx, ffd.CreateParams{Lane: "invoices", IdempotencyKey: "invoice-1001"})
	if err != nil {
		panic(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		panic(err)
	}
	_, err = client.Get(ctx, res.Execution.ID)
	fmt.Println(errors.Is(err, ffd.ErrNotFound))
	// Output: true
}

// The daemon's work embedded in the application: a two-step flow runs to
// its end with no `ffd run` anywhere.
func ExampleNewDaemon() {
	ctx := context.Background()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	quiet := zap.NewNop() // examples compare stdout; logs would go to stderr
	client, err := ffd.NewClient(pool, &ffd.Config{Logger: quiet})
	if err != nil {
		panic(err)
	}
	daemon, err := ffd.NewDaemon(pool, &ffd.DaemonConfig{Logger: quiet})
	if err != nil {
		panic(err)
	}
	if err := daemon.Start(ctx); err != nil {
		panic(err)
	}
	defer daemon.Stop()

	worker, err := ffd.NewWorker(client, ffd.WorkerConfig{
		Lanes:   []string{"reports"},
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil },
	})
	if err != nil {
		panic(err)
	}
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer worker.Stop(ctx)

	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "gather", Params: ffd.CreateParams{Lane: "reports"}},
			{Ref: "render", Params: ffd.CreateParams{Lane: "reports"}},
		},
		Edges: []ffd.SubmitEdge{{From: "gather", To: "render"}},
	})
	if err != nil {
		panic(err)
	}
	for {
		flow, err := client.DescribeFlow(ctx, sub.Flow.ID)
		if err != nil {
			panic(err)
		}
		if flow.State != ffd.FlowOpen {
			fmt.Println(flow.State)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: completed
}
