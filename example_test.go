package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
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
	defer daemon.Stop(context.Background())

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

// Typed handlers, one per kind: the payload arrives decoded, the result
// leaves encoded.
func ExampleHandle() {
	ctx := context.Background()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	client, _ := ffd.NewClient(pool, &ffd.Config{Logger: zap.NewNop()})

	type resize struct {
		Image string `json:"image"`
		Width int    `json:"width"`
	}
	type resized struct {
		URL string `json:"url"`
	}
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "resize", func(_ context.Context, _ *ffd.Job, r resize) (resized, error) {
		return resized{URL: fmt.Sprintf("https://cdn.example.com/%d/%s", r.Width, r.Image)}, nil
	})
	worker, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"images"}, Kinds: kinds})
	if err != nil {
		panic(err)
	}
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer worker.Stop(ctx)

	created, err := client.Create(ctx, ffd.CreateParams{Lane: "images", Kind: "resize", JSON: resize{Image: "cat.png", Width: 320}})
	if err != nil {
		panic(err)
	}
	for {
		x, err := client.Get(ctx, created.Execution.ID)
		if err != nil {
			panic(err)
		}
		if x.State == ffd.StateCompleted {
			fmt.Println(string(x.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: {"url":"https://cdn.example.com/320/cat.png"}
}

// A join step combines its parents' outputs: UpstreamResults reads them,
// decoded, by step name, in one query.
func ExampleUpstreamResults() {
	ctx := context.Background()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	quiet := zap.NewNop()
	client, _ := ffd.NewClient(pool, &ffd.Config{Logger: quiet})
	daemon, _ := ffd.NewDaemon(pool, &ffd.DaemonConfig{Logger: quiet})
	if err := daemon.Start(ctx); err != nil {
		panic(err)
	}
	defer daemon.Stop(context.Background())

	type count struct {
		Words int `json:"words"`
	}
	kinds := ffd.NewKinds()
	ffd.Handle(kinds, "count", func(_ context.Context, job *ffd.Job, text string) (count, error) {
		return count{Words: len(strings.Fields(text))}, nil
	})
	ffd.Handle(kinds, "total", func(ctx context.Context, job *ffd.Job, _ struct{}) (int, error) {
		counts, err := ffd.UpstreamResults[count](ctx, job)
		if err != nil {
			return 0, err
		}
		return counts["chapter-1"].Words + counts["chapter-2"].Words, nil
	})
	worker, _ := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"books"}, Kinds: kinds})
	if err := worker.Start(ctx); err != nil {
		panic(err)
	}
	defer worker.Stop(ctx)

	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{
			{Ref: "chapter-1", Params: ffd.CreateParams{Lane: "books", Kind: "count", JSON: "It was a dark and stormy night"}},
			{Ref: "chapter-2", Params: ffd.CreateParams{Lane: "books", Kind: "count", JSON: "The end"}},
			{Ref: "total", Params: ffd.CreateParams{Lane: "books", Kind: "total"}},
		},
		Edges: []ffd.SubmitEdge{{From: "chapter-1", To: "total"}, {From: "chapter-2", To: "total"}},
	})
	if err != nil {
		panic(err)
	}
	for {
		x, err := client.Get(ctx, sub.Executions["total"].ID)
		if err != nil {
			panic(err)
		}
		if x.State.Terminal() {
			fmt.Println(x.State, string(x.Result))
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Output: completed 9
}

// A schedule: every second, an execution; the daemon fires each tick
// once.
func ExampleClient_CreateSchedule() {
	ctx := context.Background()
	pool, err := ffd.NewPool(ctx, os.Getenv("FFD_DATABASE_URL"), nil)
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	quiet := zap.NewNop()
	client, _ := ffd.NewClient(pool, &ffd.Config{Logger: quiet})
	daemon, _ := ffd.NewDaemon(pool, &ffd.DaemonConfig{Logger: quiet})
	if err := daemon.Start(ctx); err != nil {
		panic(err)
	}
	defer daemon.Stop(context.Background())

	s, err := client.CreateSchedule(ctx, ffd.ScheduleParams{
		Name:      "heartbeat",
		Cron:      "@every 1s",
		Execution: &ffd.CreateParams{Lane: "beats", Kind: "beat"},
	})
	if err != nil {
		panic(err)
	}
	for {
		page, err := client.List(ctx, ffd.ListParams{Lane: "beats", Kind: "beat"})
		if err != nil {
			panic(err)
		}
		if len(page.Executions) > 0 {
			fmt.Println(s.Name, page.Executions[0].Tags["ffd_schedule"])
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := client.PauseSchedule(ctx, "heartbeat"); err != nil {
		panic(err)
	}
	// Output: heartbeat heartbeat
}
