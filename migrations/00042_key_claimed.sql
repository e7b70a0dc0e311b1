-- +goose Up
-- ff_key.claimed counts the executions of a key that claims took, on a
-- distributed Postgres (the routed keyed claim; one Postgres leaves it
-- at 0). A routed claim reads each key's running executions across the
-- shards before it locks the keys whose turn it is; what other claims
-- took between that read and the locks is what this count grew by, read
-- with the locks. It replaces a second read across every shard after the
-- locks (docs/flow-control.md). Only its growth within one claim means
-- anything; a claim adds what it picked, which may be more than it took
-- (a row another claimer took first), so a count errs high, never low.
ALTER TABLE ff_key ADD COLUMN IF NOT EXISTS claimed bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE ff_key DROP COLUMN IF EXISTS claimed;
