// Command river is ffd bench's peer baseline: River's throughput on the
// same no-op workload as `ffd bench --scenario throughput` (N jobs
// inserted first, then drained by a client with W workers), against the
// database given, printed as one JSON object. It is a module of its own
// so that ffd never depends on River.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	url := flag.String("database-url", os.Getenv("FFD_DATABASE_URL"), "database")
	jobs := flag.Int("executions", 20000, "jobs")
	workers := flag.Int("workers", 100, "worker concurrency")
	flag.Parse()
	if err := run(*url, *jobs, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "river peer:", err)
		os.Exit(1)
	}
}

func run(url string, jobs, workers int) error {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(max(20, min(workers/2, 60))) // as ffd bench sizes its pool
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		return err
	}
	w := river.NewWorkers()
	river.AddWorker(w, &noopWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: workers}},
		Workers: w,
		// River's default cooldown (100 ms between fetches) caps a queue
		// at MaxWorkers × 10 jobs per second; its floor lets it run at the
		// database's pace, which is what is being compared.
		FetchCooldown:     time.Millisecond,
		FetchPollInterval: 100 * time.Millisecond,
	})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, jobs)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	if _, err := client.InsertManyFast(ctx, params); err != nil {
		return fmt.Errorf("insert: %w", err)
	}
	start := time.Now()
	if err := client.Start(ctx); err != nil {
		return err
	}
	// Polled like ffd bench's own throughput scenario, so that both pay
	// the same for being watched.
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
			return err
		}
		if done == jobs {
			break
		}
		if time.Since(start) > 5*time.Minute {
			return fmt.Errorf("%d of %d jobs completed", done, jobs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	_ = client.Stop(sctx)
	return json.NewEncoder(os.Stdout).Encode(map[string]any{
		"peer": "river", "executions": jobs, "workers": workers,
		"executions_per_second": float64(jobs) / took.Seconds(), "duration_ms": took.Milliseconds(),
	})
}
