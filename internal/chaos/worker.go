//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// Environment of a worker process (WorkerMain).
const (
	// EnvRole set to RoleWorker makes a test binary run WorkerMain instead
	// of its tests.
	EnvRole    = "FFD_CHAOS_ROLE"
	RoleWorker = "worker"
	envURL     = "FFD_CHAOS_DATABASE_URL"
	envName    = "FFD_CHAOS_WORKER"
	// envLongRuns set to 1 makes one run in eight last 1.5 to 3 s
	// (Config.LongRuns).
	envLongRuns = "FFD_CHAOS_LONG_RUNS"
)

// Lane is the lane every execution of the suite runs on.
const Lane = "chaos"

// Kinds name a node by its index and its planned outcome: "n7.ok" succeeds,
// "n7.fail" fails permanently.
func kindOf(node int, succeeds bool) string {
	if succeeds {
		return fmt.Sprintf("n%d.ok", node)
	}
	return fmt.Sprintf("n%d.fail", node)
}

// WorkerMain runs a worker process of the suite until SIGTERM or SIGINT,
// and returns its exit code. A test binary calls it from TestMain when
// EnvRole is RoleWorker.
func WorkerMain() int {
	log, _ := zap.NewProduction()
	defer func() { _ = log.Sync() }()
	if err := runWorker(log); err != nil {
		log.Error("chaos worker failed", zap.Error(err))
		return 1
	}
	return 0
}

func runWorker(log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	name := os.Getenv(envName)
	cfg, err := pgxpool.ParseConfig(os.Getenv(envURL))
	if err != nil {
		return fmt.Errorf("parse %s: %w", envURL, err)
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "chaos-" + name
	cfg.MaxConns = workerMaxConns
	if err := openSuccessLog(); err != nil {
		return err
	}
	if err := ffd.ConfigurePool(cfg, nil); err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	client, err := ffd.NewClient(pool, &ffd.Config{Logger: log})
	if err != nil {
		return err
	}
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{
		Lanes: []string{Lane, KeyedLane}, ID: name, Concurrency: 16, PollInterval: 250 * time.Millisecond,
		Handler: handle, Versions: strings.Split(os.Getenv(envVersions), ","),
	})
	if err != nil {
		return err
	}
	return w.Run(ctx, 5*time.Second)
}

// longRuns is envLongRuns, read once.
var longRuns = os.Getenv(envLongRuns) == "1"

// handle does a few milliseconds of "work" (with LongRuns, one run in
// eight a few seconds) and then what the kind says.
func handle(ctx context.Context, job *ffd.Job) ([]byte, error) {
	work := time.Duration(rand.IntN(20)) * time.Millisecond
	if longRuns && !strings.HasPrefix(job.Kind, "d.") && job.ID.UUID[15]%8 == 0 {
		work = 1500*time.Millisecond + time.Duration(rand.IntN(1500))*time.Millisecond
	}
	select {
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	case <-time.After(work):
	}
	if strings.HasPrefix(job.Kind, "d.") {
		return handleDurable(ctx, job)
	}
	if len(job.Kind) > 2 && strings.Contains("sgve", job.Kind[:1]) && job.Kind[1] == '.' {
		return handleLinked(ctx, job)
	}
	if strings.HasSuffix(job.Kind, ".fail") {
		return nil, ffd.Permanent(errors.New("planned failure"))
	}
	logSuccess(job)
	return []byte(`{"ok":true}`), nil
}
