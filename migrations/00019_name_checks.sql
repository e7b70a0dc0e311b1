-- +goose NO TRANSACTION
-- +goose Up
-- The name checks said `name ~ '^[A-Za-z0-9_.:-]{1,128}$'`. Postgres's
-- regular expressions expand a bounded repetition into that many copies
-- of its atom, and Postgres evaluates every CHECK constraint of a row on
-- every insert and every update, whatever columns changed: on
-- ff_execution this one check was about half of what a COPY of new rows
-- cost (32 -> 15 µs of database time per row, docs/benchmarks.md), and it
-- ran again on every claim and every completion. The same rule, written
-- as a length test and an unbounded class, costs next to nothing.
--
-- Each new check is added NOT VALID (a short lock), validated in a
-- transaction of its own (writes go on meanwhile), and only then is the
-- old one dropped, so no row is ever unchecked. The rule is unchanged:
-- every name the old check accepted passes, and no other.
-- +goose StatementBegin
DO $$
DECLARE
    t text[];
BEGIN
    FOREACH t SLICE 1 IN ARRAY ARRAY[
        ['ff_execution', 'lane', 'ff_execution_lane_form'],
        ['ff_lane', 'lane', 'ff_lane_lane_form'],
        ['ff_outbox_consumer', 'name', 'ff_outbox_consumer_name_form'],
        ['ff_schedule', 'name', 'ff_schedule_name_form']] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conrelid = t[1]::regclass AND conname = t[3]) THEN
            EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (length(%I) BETWEEN 1 AND 128 AND %I ~ %L) NOT VALID',
                t[1], t[3], t[2], t[2], '^[A-Za-z0-9_.:-]+$');
        END IF;
    END LOOP;
END $$;
-- +goose StatementEnd
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_lane_form;
ALTER TABLE ff_lane VALIDATE CONSTRAINT ff_lane_lane_form;
ALTER TABLE ff_outbox_consumer VALIDATE CONSTRAINT ff_outbox_consumer_name_form;
ALTER TABLE ff_schedule VALIDATE CONSTRAINT ff_schedule_name_form;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_lane_check;
ALTER TABLE ff_lane DROP CONSTRAINT IF EXISTS ff_lane_lane_check;
ALTER TABLE ff_outbox_consumer DROP CONSTRAINT IF EXISTS ff_outbox_consumer_name_check;
ALTER TABLE ff_schedule DROP CONSTRAINT IF EXISTS ff_schedule_name_check;

-- +goose Down
ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_lane_check CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;
ALTER TABLE ff_lane ADD CONSTRAINT ff_lane_lane_check CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;
ALTER TABLE ff_outbox_consumer ADD CONSTRAINT ff_outbox_consumer_name_check CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;
ALTER TABLE ff_schedule ADD CONSTRAINT ff_schedule_name_check CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$') NOT VALID;
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_lane_check;
ALTER TABLE ff_lane VALIDATE CONSTRAINT ff_lane_lane_check;
ALTER TABLE ff_outbox_consumer VALIDATE CONSTRAINT ff_outbox_consumer_name_check;
ALTER TABLE ff_schedule VALIDATE CONSTRAINT ff_schedule_name_check;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_lane_form;
ALTER TABLE ff_lane DROP CONSTRAINT IF EXISTS ff_lane_lane_form;
ALTER TABLE ff_outbox_consumer DROP CONSTRAINT IF EXISTS ff_outbox_consumer_name_form;
ALTER TABLE ff_schedule DROP CONSTRAINT IF EXISTS ff_schedule_name_form;
