package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

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
