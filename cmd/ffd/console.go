package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/console"
)

// DefaultConsoleAddr is where `ffd console` listens unless told.
const DefaultConsoleAddr = "127.0.0.1:9465"

// ConsoleCmd serves the web console on its own.
type ConsoleCmd struct {
	Addr string `name:"addr" env:"FFD_CONSOLE_ADDR" default:"127.0.0.1:9465" help:"Address to serve the console on (loopback by default)."`
}

// Run serves until interrupted.
func (c *ConsoleCmd) Run(ctx context.Context, g *Globals) error {
	pool, err := g.checkedPool(ctx)
	if err != nil {
		return err
	}
	g.closes = append(g.closes, pool.Close)
	con, err := console.New(console.Config{Pool: pool, Logger: g.log.Named("console"), Auth: consoleAuth()})
	if err != nil {
		return err
	}
	defer con.Close()
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("console on %s: %w", c.Addr, err)
	}
	srv := &http.Server{Handler: con, ReadHeaderTimeout: 5 * time.Second}
	g.log.Info("console listening", zap.String("addr", ln.Addr().String()))
	fmt.Fprintf(g.stdout, "ffd console: http://%s/\n", ln.Addr())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// consoleAuth reads the console's credentials from the environment (never
// from flags, which other users of the machine can see): FFD_CONSOLE_TOKEN,
// or FFD_CONSOLE_USER with FFD_CONSOLE_PASSWORD. Without any, the console
// is read-only.
func consoleAuth() console.Auth {
	return console.Auth{Token: os.Getenv("FFD_CONSOLE_TOKEN"), User: os.Getenv("FFD_CONSOLE_USER"), Password: os.Getenv("FFD_CONSOLE_PASSWORD")}
}
