-- +goose NO TRANSACTION
-- +goose Up
-- Uniqueness that ends, unlike the idempotency key's: a unique key held
-- while its execution is live (blocked, pending, running), or within a
-- time window (the key is stored with the window's start, so the next
-- window's create uses another). Both partial indexes hold only rows that
-- asked for uniqueness.
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS unique_key text;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS unique_while_live boolean;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_live ON ff_execution (namespace, unique_key)
    WHERE unique_key IS NOT NULL AND unique_while_live AND state IN ('blocked', 'pending', 'running');
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_unique_window ON ff_execution (namespace, unique_key)
    WHERE unique_key IS NOT NULL AND NOT unique_while_live;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_unique_window;
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_unique_live;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS unique_while_live;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS unique_key;
