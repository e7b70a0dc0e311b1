-- +goose NO TRANSACTION
-- +goose Up
-- Strict order per key (docs/intake.md, "Strict order per key"): a key
-- with strict set runs its executions one at a time, in the order they
-- were created. key_seq is an execution's place in its strict key: taken
-- from ff_key_seq while the create holds the key's row, so that the
-- places of one key follow the order its creates commit in. Executions of
-- other keys, and unkeyed ones, have none, and write nothing more.
ALTER TABLE ff_key ADD COLUMN IF NOT EXISTS strict boolean NOT NULL DEFAULT false;
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'ff_key_strict') THEN
        ALTER TABLE ff_key ADD CONSTRAINT ff_key_strict CHECK (NOT strict OR max_running = 1);
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS key_seq bigint;
CREATE SEQUENCE IF NOT EXISTS ff_key_seq;
-- A strict key's head: its pending execution of the lowest place. The
-- index holds only executions with a place, so keys without strict order
-- write no entry to it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_key_order
    ON ff_execution (lane, concurrency_key, key_seq)
    WHERE state = 'pending' AND key_seq IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_key_order;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS key_seq;
DROP SEQUENCE IF EXISTS ff_key_seq;
ALTER TABLE ff_key DROP CONSTRAINT IF EXISTS ff_key_strict;
ALTER TABLE ff_key DROP COLUMN IF EXISTS strict;
