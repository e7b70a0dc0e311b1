package outbox

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd/ffdtype"
)

// StreamNodes streams from each database named at once, from the slot of
// the same index, as StreamWAL does from the worker nodes of a Citus
// cluster: one test server's databases stand in for the nodes (and its
// slots are the server's, so each needs its own name).
func StreamNodes(ctx context.Context, cfg ffdtype.WALConfig, connStrings, slots []string) error {
	var nodes []*pgconn.Config
	for _, cs := range connStrings {
		c, err := connConfig(cs, cfg.Session)
		if err != nil {
			return err
		}
		nodes = append(nodes, &c.Config)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	cfg.Nodes = connStrings // named, not discovered: nothing to watch
	return streamNodes(ctx, cfg, nodes, slots)
}
