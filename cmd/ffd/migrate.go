package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/flowfabric/ffd/internal/schema"
	"github.com/flowfabric/ffd/internal/store"
)

// MigrateCmd groups the migration subcommands.
type MigrateCmd struct {
	Up     MigrateUpCmd     `cmd:"" help:"Apply every pending migration (safe to run from several hosts at once)."`
	Status MigrateStatusCmd `cmd:"" help:"Print the database's schema version and the latest this binary knows."`

	Distribution MigrateDistributionCmd `cmd:"" help:"Check the live schema can be distributed by partition_key (Citus) and print the calls that place each table; exit 1 on a key a distributed Postgres could not enforce."`
}

// MigrateUpCmd applies pending migrations.
type MigrateUpCmd struct {
	LockWait time.Duration `name:"lock-wait" env:"FFD_MIGRATE_LOCK_WAIT" default:"${migrate_lock_wait}" help:"How long to wait for another migrator to finish."`
}

// Run applies the migrations.
func (c *MigrateUpCmd) Run(ctx context.Context, g *Globals) error {
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	applied, err := schema.Up(ctx, pool, c.LockWait)
	if err != nil {
		return err
	}
	for _, a := range applied {
		g.log.Info("migration applied", zap.Int64("version", a.Version), zap.String("name", a.Name), zap.Duration("duration", a.Duration))
	}
	fmt.Fprintf(g.stdout, "schema at version %d (%d applied now)\n", schema.Latest(), len(applied))
	return nil
}

// MigrateStatusCmd prints the versions.
type MigrateStatusCmd struct{}

// Run prints the current and latest version; it fails when the database is
// newer than this binary.
func (c *MigrateStatusCmd) Run(ctx context.Context, g *Globals) error {
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	current, err := schema.Current(ctx, pool)
	if err != nil {
		return err
	}
	latest := schema.Latest()
	state := "up to date"
	switch {
	case current < latest:
		state = fmt.Sprintf("%d pending: run `ffd migrate up`", latest-current)
	case current > latest:
		state = "database is newer than this ffd"
	}
	fmt.Fprintf(g.stdout, "current version: %d\nlatest version:  %d\nstatus:          %s\n", current, latest, state)
	if current > latest {
		return &schema.VersionError{Found: current, Expected: latest}
	}
	api := "this binary's"
	if ok, err := schema.APICurrent(ctx, pool); err != nil {
		return err
	} else if !ok {
		api = "missing or another binary's: run `ffd migrate up`"
	}
	fmt.Fprintf(g.stdout, "SQL API:         %s\n", api)
	return nil
}

// MigrateDistributionCmd checks the schema for a distributed Postgres.
type MigrateDistributionCmd struct{}

// ErrNotDistributable is returned when the live schema holds a key a
// distributed Postgres could not enforce.
var ErrNotDistributable = errors.New("the schema cannot be distributed by partition_key")

// Run prints each table's placement and the Citus calls, or the
// violations and an error.
func (c *MigrateDistributionCmd) Run(ctx context.Context, g *Globals) error {
	pool, err := g.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	tables, bad, err := store.CheckDistribution(ctx, pool)
	if err != nil {
		return err
	}
	if len(bad) > 0 {
		for _, v := range bad {
			fmt.Fprintln(g.stdout, v)
		}
		return fmt.Errorf("%w: %d violations", ErrNotDistributable, len(bad))
	}
	fmt.Fprintf(g.stdout, "-- every unique index and foreign key of a distributed table includes %s (%s of the tables distributed by it: %s)\n",
		store.DistributionColumn, store.LaneColumn, strings.Join(store.LaneTables, ", "))
	for _, t := range tables {
		fmt.Fprintf(g.stdout, "-- %-24s %s\n", t.Table, t.Kind)
	}
	fmt.Fprint(g.stdout, store.CitusScript(tables))
	fmt.Fprintln(g.stdout, "-- one connection per node for each read across the shards (docs/scaling.md, \"Settings\")")
	fmt.Fprint(g.stdout, store.CitusSettings)
	return nil
}
