package ffd

import (
	"context"
	"time"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/leases"
	"github.com/flowfabric/ffd/internal/store"
)

// Version is a version of a handler set that a worker announced
// (docs/workflows.md, "Versions"), with its executions pending or
// running and its open flows: a version whose counts reach 0 has no
// work left for its workers.
type Version struct {
	Namespace   string
	Version     string
	AnnouncedAt time.Time
	LastSeenAt  time.Time
	// LiveExecutions are its executions pending or running; LiveFlows
	// its open flows.
	LiveExecutions int64
	LiveFlows      int64
}

// AnnounceVersions records that versions are served in the client's
// namespace, as a worker with WorkerConfig.Versions does when it starts:
// creates may then name them. For a producer deployed before its
// workers; announcing a known version again only marks it seen.
func (c *Client) AnnounceVersions(ctx context.Context, versions ...string) error {
	if len(versions) == 0 {
		return fault.Invalid(KindRequired, "versions", "", "name at least one version")
	}
	for _, v := range versions {
		if v == "" {
			return fault.Invalid(KindRequired, "versions", "", "a version needs a name")
		}
		if err := leases.ValidateVersion("versions", v); err != nil {
			return err
		}
	}
	return store.AnnounceVersions(ctx, c.pool, c.cfg.Namespace, versions)
}

// ListVersions lists the versions announced in namespace ("" for every
// namespace), newest first.
func (c *Client) ListVersions(ctx context.Context, namespace string) ([]*Version, error) {
	rows, err := store.ListVersions(ctx, c.pool, namespace)
	if err != nil {
		return nil, err
	}
	out := make([]*Version, len(rows))
	for i, r := range rows {
		out[i] = &Version{Namespace: r.Namespace, Version: r.Version, AnnouncedAt: r.AnnouncedAt, LastSeenAt: r.LastSeenAt,
			LiveExecutions: r.LiveExecutions, LiveFlows: r.LiveFlows}
	}
	return out, nil
}
