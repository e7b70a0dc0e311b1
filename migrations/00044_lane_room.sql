-- +goose Up
-- A capped or rate-limited lane's room moves out of ff_lane: the row its
-- claims lock while they count what runs in it, and its rate bucket
-- (tokens left at tokens_at; NULL: a full bucket). ff_lane keeps the
-- lane's settings. A row exists exactly while the lane is capped or
-- rate-limited (store.SetLane keeps it so; the invariants check it).
--
-- Why: on a distributed Postgres ff_lane is a reference table, copied to
-- every node, and each claim of such a lane locked its row and wrote its
-- tokens there: a lock on every node until commit, so those claims ran
-- one at a time across the cluster, each committed in two phases (which
-- also holds the outbox cursor back, docs/consumers.md). ff_lane_room is
-- distributed by lane beside ff_key, one shard on one node, so a
-- controlled claim's lane and keys are written on one node
-- (docs/scaling.md). On one Postgres it changes nothing but where the
-- claim reads and writes the bucket.
--
-- A cluster placed by an earlier release gets the table placed here; on
-- one Postgres, and on a cluster whose tables are not placed yet (`ffd
-- migrate distribution` places it), it stays a plain table.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
CREATE TABLE ff_lane_room (
    lane      text PRIMARY KEY CHECK (length(lane) >= 1 AND length(lane) <= 128 AND lane ~ '^[A-Za-z0-9_.:-]+$'),
    tokens    double precision,
    tokens_at timestamptz
);
-- +goose StatementBegin
DO $$
BEGIN
    IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = 'ff_key'::regclass) THEN
            PERFORM create_distributed_table('ff_lane_room', 'lane', colocate_with => 'ff_key');
        END IF;
    END IF;
END
$$;
-- +goose StatementEnd
INSERT INTO ff_lane_room (lane, tokens, tokens_at)
SELECT lane, tokens, tokens_at FROM ff_lane WHERE max_running IS NOT NULL OR rate_count IS NOT NULL;
ALTER TABLE ff_lane DROP COLUMN tokens, DROP COLUMN tokens_at;

-- +goose Down
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
ALTER TABLE ff_lane ADD COLUMN tokens double precision, ADD COLUMN tokens_at timestamptz;
-- Row by row: a distributed Postgres writes a reference table only from
-- values, not from a join with a distributed one.
-- +goose StatementBegin
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT lane, tokens, tokens_at FROM ff_lane_room LOOP
        UPDATE ff_lane SET tokens = r.tokens, tokens_at = r.tokens_at WHERE lane = r.lane;
    END LOOP;
END
$$;
-- +goose StatementEnd
DROP TABLE ff_lane_room;
