-- +goose NO TRANSACTION
-- +goose Up
-- The writers send their own notifications (internal/store/notice.go):
-- the NOTIFY triggers on ff_execution, ff_completion_event and
-- ff_lease_event go. On a distributed Postgres a trigger runs on the node
-- holding the shard, where the coordinator's listeners never hear it, and
-- a transaction that sent one cannot be committed in two phases; Citus
-- also refuses to distribute a table with triggers. The writer's
-- notification is the last statement of its own transaction, reads no
-- table, and so runs where the session is.
--
-- Payloads change (docs/schema.md, "Notifications"): ff_completion and
-- ff_lease name partitions instead of event ids, ff_ready and ff_revoke
-- carry comma-separated lists. The daemon takes the undispatched events
-- of the partitions it is told of, by a second partial index that leads
-- with partition_key (built while writes go on). The index by event_id
-- stays: the sweep takes the oldest events of every partition, and the
-- dispatch lag reads the oldest one.

CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_undispatched_by_partition
    ON ff_completion_event (partition_key, event_id) WHERE dispatched_at IS NULL;

DROP TRIGGER IF EXISTS ff_execution_ready_insert ON ff_execution;
DROP TRIGGER IF EXISTS ff_execution_ready_update ON ff_execution;
DROP TRIGGER IF EXISTS ff_completion_event_notify ON ff_completion_event;
DROP TRIGGER IF EXISTS ff_lease_event_notify ON ff_lease_event;
DROP TRIGGER IF EXISTS ff_lease_event_revoke_notify ON ff_lease_event;
DROP FUNCTION IF EXISTS ff_notify_ready(), ff_notify_ready_batch(), ff_notify_completion(),
    ff_notify_completion_batch(), ff_notify_lease(), ff_notify_lease_batch(), ff_notify_revoke();

-- +goose Down
-- The triggers of migration 00022 again, without the index by partition. Run it with the binaries of that schema: they expect the
-- id payloads these triggers send.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_ready() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_ready', NEW.lane);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_ready_batch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_ready', l.lane)
    FROM (SELECT DISTINCT lane FROM new_executions WHERE state = 'pending' AND run_at <= now()) l;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_completion_batch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    lo bigint;
    hi bigint;
BEGIN
    SELECT count(*), min(event_id) FILTER (WHERE dispatched_at IS NULL), max(event_id) FILTER (WHERE dispatched_at IS NULL)
        INTO n, lo, hi FROM new_events;
    IF n = 0 THEN
        RETURN NULL;
    ELSIF lo IS NULL THEN
        PERFORM pg_notify('ff_completion', '');
    ELSIF lo = hi THEN
        PERFORM pg_notify('ff_completion', lo::text);
    ELSE
        PERFORM pg_notify('ff_completion', lo::text || '-' || hi::text);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_lease_batch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    hi bigint;
BEGIN
    SELECT min(event_id), max(event_id) INTO lo, hi FROM new_events;
    IF lo IS NULL THEN
        RETURN NULL;
    ELSIF lo = hi THEN
        PERFORM pg_notify('ff_lease', lo::text);
    ELSE
        PERFORM pg_notify('ff_lease', lo::text || '-' || hi::text);
    END IF;
    PERFORM pg_notify('ff_revoke', partition_key::text || ':' || execution_id::text || ':' || lease_epoch::text)
    FROM new_events
    WHERE event_type IN ('revoked', 'expired')
    ORDER BY event_id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER ff_execution_ready_insert AFTER INSERT ON ff_execution
    REFERENCING NEW TABLE AS new_executions
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_ready_batch();
CREATE TRIGGER ff_execution_ready_update AFTER UPDATE OF state ON ff_execution
    FOR EACH ROW WHEN (NEW.state = 'pending' AND OLD.state <> 'pending' AND NEW.run_at <= now())
    EXECUTE FUNCTION ff_notify_ready();
CREATE TRIGGER ff_completion_event_notify AFTER INSERT ON ff_completion_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_completion_batch();
CREATE TRIGGER ff_lease_event_notify AFTER INSERT ON ff_lease_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_lease_batch();

DROP INDEX CONCURRENTLY IF EXISTS ff_completion_event_undispatched_by_partition;
