-- +goose NO TRANSACTION
-- +goose Up
-- Every unique index of a table sharded by partition_key now leads with
-- partition_key, so that a distributed Postgres (Citus) can enforce it on
-- each shard alone (docs/scaling.md, "One Postgres is not enough"). What
-- used to be global uniqueness becomes uniqueness within a partition plus
-- a placement rule that puts every possible holder of a value there:
--   * idempotency and unique keys: a solo execution with a key is minted
--     on the key's partition (ident.KeyPartition), so all holders of a key
--     share a partition;
--   * reruns: a rerun is minted on the partition of what it reruns;
--   * event ids: unique by the sequence that assigns them; the index stays
--     for reads in id order, no longer unique.
-- Each index is built concurrently under a new name, then swapped for the
-- old one in one short transaction (a DO block), so writers never run
-- without the guarantee and the names the code matches on stay.

-- Keys held by executions created before this placement rule live on any
-- partition: remember them here, and creates with a key refuse those too.
-- Filled once by this migration and only shrinks (retention deletes the
-- rows of the executions it deletes). Not sharded: a reference table.
CREATE TABLE IF NOT EXISTS ff_idempotency_legacy (
    namespace       text     NOT NULL,
    idempotency_key text     NOT NULL,
    partition_key   smallint NOT NULL,
    execution_id    uuid     NOT NULL,
    PRIMARY KEY (namespace, idempotency_key)
);
CREATE INDEX IF NOT EXISTS ff_idempotency_legacy_execution ON ff_idempotency_legacy (partition_key, execution_id);

CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_idempotency_p ON ff_execution (partition_key, namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_live_p ON ff_execution (partition_key, namespace, unique_key)
    WHERE unique_key IS NOT NULL AND unique_while_live AND state IN ('blocked', 'pending', 'running');
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_window_p ON ff_execution (partition_key, namespace, unique_key)
    WHERE unique_key IS NOT NULL AND NOT unique_while_live;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_rerun_p ON ff_execution (partition_key, rerun_of)
    WHERE rerun_of IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_flow_rerun_p ON ff_flow (partition_key, rerun_of)
    WHERE rerun_of IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_id_p ON ff_completion_event (event_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_lease_event_id_p ON ff_lease_event (event_id);

-- The swap. Writers of ff_execution wait for it (SHARE mode) while the
-- keys held so far are copied: no key can be taken between the copy and
-- the old index's drop.
-- +goose StatementBegin
DO $$
DECLARE
    swap text[][] := ARRAY[
        ['ff_execution_idempotency', 'ff_execution_idempotency_p'],
        ['ff_execution_unique_live', 'ff_execution_unique_live_p'],
        ['ff_execution_unique_window', 'ff_execution_unique_window_p'],
        ['ff_execution_rerun', 'ff_execution_rerun_p'],
        ['ff_flow_rerun', 'ff_flow_rerun_p'],
        ['ff_completion_event_id', 'ff_completion_event_id_p'],
        ['ff_lease_event_id', 'ff_lease_event_id_p']];
    i int;
BEGIN
    IF to_regclass('ff_execution_idempotency_p') IS NULL THEN
        RETURN; -- swapped already
    END IF;
    LOCK TABLE ff_flow, ff_execution, ff_completion_event, ff_lease_event IN SHARE MODE;
    INSERT INTO ff_idempotency_legacy (namespace, idempotency_key, partition_key, execution_id)
    SELECT namespace, idempotency_key, partition_key, execution_id
    FROM ff_execution WHERE idempotency_key IS NOT NULL
    ON CONFLICT DO NOTHING;
    FOR i IN 1 .. array_length(swap, 1) LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', swap[i][1]);
        EXECUTE format('ALTER INDEX %I RENAME TO %I', swap[i][2], swap[i][1]);
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose Down
-- Global uniqueness again. Placement kept every key on one partition and
-- the legacy table kept older keys unique, so these builds find no
-- duplicates.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_idempotency_g ON ff_execution (namespace, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_live_g ON ff_execution (namespace, unique_key)
    WHERE unique_key IS NOT NULL AND unique_while_live AND state IN ('blocked', 'pending', 'running');
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_window_g ON ff_execution (namespace, unique_key)
    WHERE unique_key IS NOT NULL AND NOT unique_while_live;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_rerun_g ON ff_execution (rerun_of)
    WHERE rerun_of IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_flow_rerun_g ON ff_flow (rerun_of)
    WHERE rerun_of IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_id_g ON ff_completion_event (event_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_lease_event_id_g ON ff_lease_event (event_id);
-- +goose StatementBegin
DO $$
DECLARE
    swap text[][] := ARRAY[
        ['ff_execution_idempotency', 'ff_execution_idempotency_g'],
        ['ff_execution_unique_live', 'ff_execution_unique_live_g'],
        ['ff_execution_unique_window', 'ff_execution_unique_window_g'],
        ['ff_execution_rerun', 'ff_execution_rerun_g'],
        ['ff_flow_rerun', 'ff_flow_rerun_g'],
        ['ff_completion_event_id', 'ff_completion_event_id_g'],
        ['ff_lease_event_id', 'ff_lease_event_id_g']];
    i int;
BEGIN
    IF to_regclass('ff_execution_idempotency_g') IS NULL THEN
        RETURN;
    END IF;
    FOR i IN 1 .. array_length(swap, 1) LOOP
        EXECUTE format('DROP INDEX IF EXISTS %I', swap[i][1]);
        EXECUTE format('ALTER INDEX %I RENAME TO %I', swap[i][2], swap[i][1]);
    END LOOP;
END $$;
-- +goose StatementEnd
DROP TABLE IF EXISTS ff_idempotency_legacy;
