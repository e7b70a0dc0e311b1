-- +goose Up
-- Flows started by events (docs/workflows.md, "Flows started by
-- events"). A trigger names an event and what each event of that name
-- starts: an execution or a flow, stored in the schedules' params format.
-- An event published twice under one key is one event: the key's unique
-- index refuses the second. The daemon fires each event once, in the
-- transaction that locks its row and marks it fired; what it starts
-- carries an id derived from (trigger, event), so a crash between the
-- two cannot start it twice.
CREATE TABLE IF NOT EXISTS ff_trigger (
    name       text        PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 128 AND name ~ '^[A-Za-z0-9_.:-]+$'),
    namespace  text        NOT NULL DEFAULT 'default',
    event      text        NOT NULL CHECK (length(event) BETWEEN 1 AND 128 AND event ~ '^[A-Za-z0-9_.:-]+$'),
    filter     jsonb       CHECK (filter IS NULL OR jsonb_typeof(filter) = 'object'),
    target     text        NOT NULL CHECK (target IN ('execution', 'flow')),
    params     jsonb       NOT NULL,
    paused     boolean     NOT NULL DEFAULT false,
    fired      bigint      NOT NULL DEFAULT 0 CHECK (fired >= 0),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS ff_trigger_event ON ff_trigger (namespace, event);

-- A published event, on its key's partition (ff_key_partition of the
-- namespace and "name/key").
CREATE TABLE IF NOT EXISTS ff_event (
    partition_key smallint    NOT NULL,
    event_id      uuid        NOT NULL,
    namespace     text        NOT NULL,
    name          text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128 AND name ~ '^[A-Za-z0-9_.:-]+$'),
    event_key     text        NOT NULL CHECK (octet_length(event_key) BETWEEN 1 AND 512),
    payload       jsonb,
    published_at  timestamptz NOT NULL DEFAULT now(),
    fired_at      timestamptz,         -- when the daemon fired its triggers
    started       integer     NOT NULL DEFAULT 0 CHECK (started >= 0),  -- executions and flows it started
    error         text,                -- why a trigger failed to fire it
    PRIMARY KEY (event_id, partition_key)
);
CREATE UNIQUE INDEX IF NOT EXISTS ff_event_key ON ff_event (partition_key, namespace, name, event_key);
CREATE INDEX IF NOT EXISTS ff_event_unfired ON ff_event (published_at) WHERE fired_at IS NULL;

-- +goose StatementBegin
-- ff_key_partition is ident.KeyPartition in SQL: CRC-16/XMODEM of the
-- namespace, a zero byte and the key, modulo the 256 partitions. A
-- program in any language places a keyed row as ffd's Go code does.
CREATE OR REPLACE FUNCTION ff_key_partition(namespace text, key text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b   bytea := convert_to(namespace, 'UTF8') || '\x00'::bytea || convert_to(key, 'UTF8');
    crc integer := 0;
BEGIN
    FOR i IN 0 .. length(b) - 1 LOOP
        crc := crc # (get_byte(b, i) << 8);
        FOR j IN 1 .. 8 LOOP
            IF (crc & 32768) <> 0 THEN
                crc := ((crc << 1) # 4129) & 65535;
            ELSE
                crc := (crc << 1) & 65535;
            END IF;
        END LOOP;
    END LOOP;
    RETURN (crc % 256)::smallint;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- ff_publish_event publishes an event from SQL, in the caller's
-- transaction: it fires once the transaction commits, not if it rolls
-- back. A key already published in the namespace under this name
-- publishes nothing. It returns the event's id, the first publication's
-- when the key was taken. It sends no notification (no function of the
-- schema does: on a distributed Postgres a function may run where nobody
-- listens): the caller adds SELECT pg_notify('ff_event', '') to have the
-- daemons fire it at its commit, or they fire it within a second.
CREATE OR REPLACE FUNCTION ff_publish_event(namespace text, name text, event_key text, payload jsonb DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    p  smallint := ff_key_partition(ff_publish_event.namespace, ff_publish_event.name || '/' || ff_publish_event.event_key);
    id uuid;
BEGIN
    INSERT INTO ff_event (partition_key, event_id, namespace, name, event_key, payload)
    VALUES (p, gen_random_uuid(), ff_publish_event.namespace, ff_publish_event.name, ff_publish_event.event_key, ff_publish_event.payload)
    ON CONFLICT (partition_key, namespace, name, event_key) DO NOTHING
    RETURNING ff_event.event_id INTO id;
    IF id IS NULL THEN
        SELECT e.event_id INTO id FROM ff_event e
        WHERE e.partition_key = p AND e.namespace = ff_publish_event.namespace
            AND e.name = ff_publish_event.name AND e.event_key = ff_publish_event.event_key;
    END IF;
    RETURN id;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION IF EXISTS ff_publish_event(text, text, text, jsonb);
DROP FUNCTION IF EXISTS ff_key_partition(text, text);
DROP TABLE IF EXISTS ff_event;
DROP TABLE IF EXISTS ff_trigger;
