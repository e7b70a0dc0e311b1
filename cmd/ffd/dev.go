package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/schema"
)

// DefaultDevPort is where `ffd dev` listens unless told otherwise, so that
// its URL stays the same from one start to the next.
const DefaultDevPort = 54329

// DevCmd runs a private PostgreSQL for development.
type DevCmd struct {
	DataDir  string `name:"data-dir" env:"FFD_DEV_DATA_DIR" help:"Cluster data directory; reused when it exists. Default: ffd/postgres in the user's cache directory (/var/lib/ffd/dev-postgres for root)."`
	Port     int    `name:"port" env:"FFD_DEV_PORT" default:"${dev_port}" help:"TCP port on 127.0.0.1; 0 picks a free one."`
	NoDaemon bool   `name:"no-daemon" env:"FFD_DEV_NO_DAEMON" help:"Run only PostgreSQL, not the daemon."`
	DaemonFlags
}

// DefaultDevDataDir is the data directory `ffd dev` uses by default. Root's
// cache lives under a home the postgres user cannot enter, so root gets a
// system path.
func DefaultDevDataDir() (string, error) {
	if os.Geteuid() == 0 {
		return "/var/lib/ffd/dev-postgres", nil
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("find the cache directory (pass --data-dir): %w", err)
	}
	return filepath.Join(cache, "ffd", "postgres"), nil
}

// Run starts the server, migrates, prints the URL and waits for ctx.
func (c *DevCmd) Run(ctx context.Context, g *Globals) error {
	dir := c.DataDir
	if dir == "" {
		var err error
		if dir, err = DefaultDevDataDir(); err != nil {
			return err
		}
	}
	if c.Port < 0 || c.Port > 65535 {
		return fmt.Errorf("--port %d: want 0..65535", c.Port)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(dir), err)
	}
	g.log.Info("starting private postgres", zap.String("data_dir", dir), zap.Int("port", c.Port))
	srv, err := pgserver.Start(ctx, pgserver.Config{DataDir: dir, Port: c.Port, Durable: true})
	if err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), pgserver.DefaultStopTimeout)
		defer cancel()
		if err := srv.Stop(stopCtx); err != nil {
			g.log.Error("stop postgres", zap.Error(err))
			return
		}
		g.log.Info("postgres stopped")
	}()
	url := srv.URL("postgres")
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	applied, err := schema.Up(ctx, pool, 0)
	pool.Close()
	if err != nil {
		return err
	}
	g.log.Info("schema ready", zap.Int64("version", schema.Latest()), zap.Int("applied", len(applied)))
	// daemonDone stays nil (never ready) without a daemon.
	var daemonDone chan error
	runCtx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	if !c.NoDaemon {
		daemonDone = make(chan error, 1)
		cfg, dpool, err := c.config(ctx, g, url)
		if err != nil {
			return err
		}
		defer dpool.Close()
		d, err := daemon.New(cfg)
		if err != nil {
			return err
		}
		go func() { daemonDone <- d.Run(runCtx) }()
	}
	fmt.Fprintf(g.stdout, "ffd dev: PostgreSQL is ready (Ctrl-C to stop)\n  FFD_DATABASE_URL=%s\n", url)
	select {
	case <-ctx.Done():
		g.log.Info("stopping")
		stopDaemon()
		if daemonDone == nil {
			return nil
		}
		return <-daemonDone
	case err := <-daemonDone:
		if err == nil {
			err = errors.New("daemon stopped unexpectedly")
		}
		return err
	case <-srv.Exited():
		return errors.New("postgres exited unexpectedly; see ffd-postgres.log in the data directory")
	}
}
