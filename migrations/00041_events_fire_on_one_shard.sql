-- +goose Up
-- An event and all its triggers start now share its partition, so that on
-- Citus the daemon fires a partition's events in one transaction on one
-- node, without a two-phase commit (docs/workflows.md, "Flows started by
-- events").
--
-- An event's id lies in the event's own partition, from SQL as from Go
-- (which mints it so since 00035): what its triggers start is placed by
-- that id (a flow's id and an execution's key are derived so as to land
-- there). Events published before keep their ids and fire as before.
--
-- What each trigger started is counted per partition in ff_trigger_fired,
-- beside the events, not in ff_trigger: that is a reference table, which
-- Citus writes on every node, and each firing that bumped its count wrote
-- every node and held the trigger's row, one firing at a time, to a
-- two-phase commit. ff_trigger.fired keeps the counts from before; a
-- trigger's count is it plus its rows here. A row is a trigger's by name
-- and creation time, so that a trigger deleted and created again under
-- its name starts from none, whatever a firing that raced the delete left.
CREATE TABLE IF NOT EXISTS ff_trigger_fired (
    partition_key      smallint    NOT NULL,
    trigger_name       text        NOT NULL,
    trigger_created_at timestamptz NOT NULL,
    fired              bigint      NOT NULL CHECK (fired >= 0),
    PRIMARY KEY (partition_key, trigger_name, trigger_created_at)
);

-- +goose StatementBegin
-- ff_crc16 is CRC-16/XMODEM (polynomial 0x1021, init 0, no reflection, no
-- xorout) of b, as ident.CRC16 computes it.
CREATE OR REPLACE FUNCTION ff_crc16(b bytea) RETURNS integer
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
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
    RETURN crc;
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- ff_uuid_in_partition is u with its last two bytes replaced so that its
-- partition (its CRC-16 mod 256) is p, as ident.InPartition computes it:
-- the CRC is linear in the bytes, so the two bytes are the xor of the
-- constants whose CRC is each bit the partition needs flipped.
CREATE OR REPLACE FUNCTION ff_uuid_in_partition(u uuid, p smallint) RETURNS uuid
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
    b   bytea := set_byte(set_byte(uuid_send(u), 14, 0), 15, 0);
    k   integer[] := ARRAY[40305, 10947, 21894, 43788, 17977, 35954, 2245, 4490];
    low integer;
    x   integer := 0;
BEGIN
    IF p < 0 OR p > 255 THEN
        RAISE EXCEPTION 'ff_uuid_in_partition: partition % is not in 0..255', p
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    low := (ff_crc16(b) & 255) # p;
    FOR j IN 0 .. 7 LOOP
        IF (low >> j) & 1 = 1 THEN
            x := x # k[j + 1];
        END IF;
    END LOOP;
    RETURN encode(set_byte(set_byte(b, 14, x >> 8), 15, x & 255), 'hex')::uuid;
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
    VALUES (p, ff_uuid_in_partition(gen_random_uuid(), p), ff_publish_event.namespace, ff_publish_event.name,
        ff_publish_event.event_key, ff_publish_event.payload)
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
-- +goose StatementBegin
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
DROP FUNCTION IF EXISTS ff_uuid_in_partition(uuid, smallint);
DROP FUNCTION IF EXISTS ff_crc16(bytea);
UPDATE ff_trigger t SET fired = t.fired + c.fired
FROM (SELECT trigger_name, trigger_created_at, sum(fired) AS fired FROM ff_trigger_fired GROUP BY 1, 2) c
WHERE c.trigger_name = t.name AND c.trigger_created_at = t.created_at;
DROP TABLE IF EXISTS ff_trigger_fired;
