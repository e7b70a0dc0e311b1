-- +goose NO TRANSACTION
-- +goose Up
-- The primary keys of ff_execution, ff_completion_event and ff_lease_event
-- put the id first: (execution_id, partition_key) and (event_id,
-- partition_key), where they led with partition_key.
--
-- Ids grow: execution ids are v7 uuids (time first), event ids come from a
-- sequence. With the id first, a new row's key lands at the right edge of
-- the index, where Postgres appends without a search from the root; with
-- partition_key first it landed in one of 256 places. And each table had a
-- second index on the id alone (ff_execution_list, ff_completion_event_id,
-- ff_lease_event_id) for lookups by id and reads in id order, which the
-- new key serves: those indexes go, and with them one index entry per
-- insert and, on ff_execution, per claim and per ending (an update that
-- changes an indexed column writes an entry in every index). Measured on
-- one machine, alternating (docs/benchmarks.md): COPY of new executions
-- 12-14 -> 9-11 µs of database time per row; claim to completion at 400
-- workers 63-66 -> 50-54 µs per execution.
--
-- The key still holds partition_key, so a distributed Postgres still
-- enforces it on each shard (docs/scaling.md); the foreign keys to
-- ff_execution are unchanged, since Postgres matches a referenced key by
-- its columns in any order.
--
-- Each new key is built concurrently, then swapped in one short
-- transaction per table: the foreign keys that depend on the old key are
-- dropped and added again NOT VALID in it, and validated afterwards while
-- writes go on.
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_key ON ff_execution (execution_id, partition_key);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_key ON ff_completion_event (event_id, partition_key);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_lease_event_key ON ff_lease_event (event_id, partition_key);

-- +goose StatementBegin
DO $$
DECLARE
    fk record;
    fks text[][] := '{}';
    i int;
BEGIN
    IF to_regclass('ff_execution_key') IS NULL THEN
        RETURN; -- swapped already
    END IF;
    LOCK TABLE ff_execution, ff_attempt, ff_edge, ff_edge_group IN ACCESS EXCLUSIVE MODE;
    FOR fk IN SELECT conrelid::regclass::text AS tab, conname::text AS name, pg_get_constraintdef(oid) AS def
        FROM pg_constraint WHERE contype = 'f' AND confrelid = 'ff_execution'::regclass
        ORDER BY 1, 2
    LOOP
        fks := fks || ARRAY[[fk.tab, fk.name, fk.def]];
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tab, fk.name);
    END LOOP;
    ALTER TABLE ff_execution DROP CONSTRAINT ff_execution_pkey;
    ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_pkey PRIMARY KEY USING INDEX ff_execution_key;
    FOR i IN 1 .. coalesce(array_length(fks, 1), 0) LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s NOT VALID', fks[i][1], fks[i][2], fks[i][3]);
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    fk record;
BEGIN
    FOR fk IN SELECT conrelid::regclass::text AS tab, conname::text AS name
        FROM pg_constraint WHERE contype = 'f' AND confrelid = 'ff_execution'::regclass AND NOT convalidated
    LOOP
        EXECUTE format('ALTER TABLE %s VALIDATE CONSTRAINT %I', fk.tab, fk.name);
    END LOOP;
END $$;
-- +goose StatementEnd

-- +goose StatementBegin
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['ff_completion_event', 'ff_lease_event'] LOOP
        IF to_regclass(t || '_key') IS NOT NULL THEN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', t);
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, t || '_pkey');
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY USING INDEX %I', t, t || '_pkey', t || '_key');
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd

DROP INDEX CONCURRENTLY IF EXISTS ff_execution_list;
DROP INDEX CONCURRENTLY IF EXISTS ff_completion_event_id;
DROP INDEX CONCURRENTLY IF EXISTS ff_lease_event_id;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_list ON ff_execution (execution_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_id ON ff_completion_event (event_id);
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_lease_event_id ON ff_lease_event (event_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_key ON ff_execution (partition_key, execution_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_completion_event_key ON ff_completion_event (partition_key, event_id);
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_lease_event_key ON ff_lease_event (partition_key, event_id);

-- +goose StatementBegin
DO $$
DECLARE
    fk record;
    fks text[][] := '{}';
    i int;
    t text;
BEGIN
    IF to_regclass('ff_execution_key') IS NOT NULL THEN
        LOCK TABLE ff_execution, ff_attempt, ff_edge, ff_edge_group IN ACCESS EXCLUSIVE MODE;
        FOR fk IN SELECT conrelid::regclass::text AS tab, conname::text AS name, pg_get_constraintdef(oid) AS def
            FROM pg_constraint WHERE contype = 'f' AND confrelid = 'ff_execution'::regclass
            ORDER BY 1, 2
        LOOP
            fks := fks || ARRAY[[fk.tab, fk.name, fk.def]];
            EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tab, fk.name);
        END LOOP;
        ALTER TABLE ff_execution DROP CONSTRAINT ff_execution_pkey;
        ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_pkey PRIMARY KEY USING INDEX ff_execution_key;
        FOR i IN 1 .. coalesce(array_length(fks, 1), 0) LOOP
            EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', fks[i][1], fks[i][2], fks[i][3]);
        END LOOP;
    END IF;
    FOREACH t IN ARRAY ARRAY['ff_completion_event', 'ff_lease_event'] LOOP
        IF to_regclass(t || '_key') IS NOT NULL THEN
            EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', t);
            EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', t, t || '_pkey');
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I PRIMARY KEY USING INDEX %I', t, t || '_pkey', t || '_key');
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
