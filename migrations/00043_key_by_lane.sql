-- +goose NO TRANSACTION
-- +goose Up
-- On a distributed Postgres ff_key is distributed by lane, one shard on
-- one node, where it was a reference table: a keyed claim locks
-- and writes its keys' rows, and on a reference table every such write
-- and lock took a lock of the table's one shard on every node until
-- commit, so keyed claims ran one at a time across the cluster, each
-- committed in two phases (docs/flow-control.md). A cluster placed by an
-- earlier release is placed again here; one Postgres, and a cluster whose
-- tables are not placed yet (`ffd migrate distribution` places ff_key by
-- lane), are left as they are. The table is copied while it is locked:
-- it holds a row per key of a controlled lane.
-- +goose StatementBegin
DO $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                WHERE logicalrelid = 'ff_key'::regclass AND partmethod = 'n') THEN
            PERFORM undistribute_table('ff_key');
            PERFORM create_distributed_table('ff_key', 'lane', colocate_with => 'none', shard_count => 1);
            PERFORM truncate_local_data_after_distributing_table('ff_key');
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                WHERE logicalrelid = 'ff_key'::regclass AND partmethod = 'h') THEN
            PERFORM undistribute_table('ff_key');
            PERFORM create_reference_table('ff_key');
            PERFORM truncate_local_data_after_distributing_table('ff_key');
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd
