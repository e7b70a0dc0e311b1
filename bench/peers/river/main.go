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
	mode := flag.String("mode", "work", "work: jobs inserted beforehand, then worked (ffd bench's throughput); insert: InsertManyFast in batches of 1000 (ffd bench's enqueue)")
	flag.Parse()
	run := runWork
	if *mode == "insert" {
		run = runInsert
	} else if *mode != "work" {
		fmt.Fprintln(os.Stderr, "river peer: --mode is work or insert")
		os.Exit(2)
	}
	if err := run(*url, *jobs, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "river peer:", err)
		os.Exit(1)
	}
}

// connect opens the pool and brings River's schema up, with no jobs.
func connect(ctx context.Context, url string, workers int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(max(20, min(workers/2, 60))) // as ffd bench sizes its pool
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		pool.Close()
		return nil, err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	if _, err := pool.Exec(ctx, `TRUNCATE river_job`); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// dbTime is the database's execution time so far over this database
// (pg_stat_statements), as ffd bench reads it; false without the
// extension.
func dbTime(ctx context.Context, pool *pgxpool.Pool) (time.Duration, bool) {
	var ms float64
	err := pool.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).Scan(&ms)
	if err != nil {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// runInsert times InsertManyFast of jobs in batches of 1000, as ffd bench's
// enqueue scenario times CreateMany.
func runInsert(url string, jobs, workers int) error {
	ctx := context.Background()
	pool, err := connect(ctx, url, workers)
	if err != nil {
		return err
	}
	defer pool.Close()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, 0, 1000)
	db0, hasDB := dbTime(ctx, pool)
	start := time.Now()
	for done := 0; done < jobs; done += len(params) {
		params = params[:0]
		for range min(1000, jobs-done) {
			params = append(params, river.InsertManyParams{Args: noopArgs{}})
		}
		if _, err := client.InsertManyFast(ctx, params); err != nil {
			return fmt.Errorf("insert: %w", err)
		}
	}
	took := time.Since(start)
	out := map[string]any{
		"peer": "river", "mode": "insert", "executions": jobs,
		"executions_per_second": float64(jobs) / took.Seconds(), "duration_ms": took.Milliseconds(),
	}
	if db1, _ := dbTime(ctx, pool); hasDB {
		out["db_us_per_execution"] = float64((db1 - db0).Microseconds()) / float64(jobs)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// runWork inserts jobs, then works them with a no-op worker and reports
// the rate over the jobs' own timestamps (first attempt to last
// finalization), as ffd bench's throughput scenario does over its attempts.
func runWork(url string, jobs, workers int) error {
	ctx := context.Background()
	pool, err := connect(ctx, url, workers)
	if err != nil {
		return err
	}
	defer pool.Close()
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
	db0, hasDB := dbTime(ctx, pool)
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
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(start)
	sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
	defer scancel()
	_ = client.Stop(sctx)
	db1, _ := dbTime(ctx, pool)
	var span float64
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM max(finalized_at) - min(attempted_at)) FROM river_job`).Scan(&span); err != nil {
		return err
	}
	out := map[string]any{
		"peer": "river", "mode": "work", "executions": jobs, "workers": workers,
		"executions_per_second": float64(jobs) / span, "wall_ms": took.Milliseconds(),
	}
	if hasDB {
		out["db_us_per_execution"] = float64((db1 - db0).Microseconds()) / float64(jobs)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
