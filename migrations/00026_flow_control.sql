-- +goose NO TRANSACTION
-- +goose Up
-- Flow control (docs/flow-control.md): concurrency keys, rate limits and
-- fair turns across keys. Each statement commits on its own, so that the
-- claim index is rebuilt concurrently and a check is validated on a large
-- table without holding the lock that added it.
--
-- An execution may carry a concurrency key (NULL for most). Keyed
-- executions are claimed only by the controlled claim, which takes turns
-- across the keys of a lane and counts each key's running executions
-- under the key's row lock; the plain claim never sees them, because the
-- claim index holds only unkeyed rows. A lane with keyed executions, a
-- rate limit, a cap or a pause has an ff_lane row, and the plain claim
-- takes nothing from a lane with a row.
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS concurrency_key text;
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'ff_execution_concurrency_key') THEN
        ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_concurrency_key
            CHECK (octet_length(concurrency_key) BETWEEN 1 AND 256) NOT VALID;
    END IF;
END
$$;
-- +goose StatementEnd
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_concurrency_key;

-- The claim index without keyed rows, built beside the old one, which it
-- then replaces under the old name.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_claim_unkeyed
    ON ff_execution (lane, priority DESC, run_at, execution_id)
    WHERE state = 'pending' AND concurrency_key IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_claim;
ALTER INDEX IF EXISTS ff_execution_claim_unkeyed RENAME TO ff_execution_claim;
-- A key's due executions in claim order, and its running ones (counted
-- under its row lock) and blocked ones (a key with none of the three is
-- idle, and the sweep forgets it). Neither holds an unkeyed row.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_claim_keyed
    ON ff_execution (lane, concurrency_key, priority DESC, run_at, execution_id)
    WHERE state = 'pending' AND concurrency_key IS NOT NULL;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_live_keyed
    ON ff_execution (lane, concurrency_key, state)
    WHERE state IN ('blocked', 'running') AND concurrency_key IS NOT NULL;

-- A lane's rate limit is a token bucket: rate_count starts per
-- rate_interval, at most rate_burst at once; tokens is what was left at
-- tokens_at (NULL: a full bucket). keyed: the lane has held keyed
-- executions, so its claims take turns across its keys.
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS keyed boolean NOT NULL DEFAULT false;
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS rate_count integer CHECK (rate_count >= 1);
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS rate_interval interval
    CHECK (rate_interval >= '1 millisecond' AND rate_interval <= '1 day');
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS rate_burst integer CHECK (rate_burst >= 1);
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS tokens double precision;
ALTER TABLE ff_lane ADD COLUMN IF NOT EXISTS tokens_at timestamptz;
-- +goose StatementBegin
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'ff_lane_rate') THEN
        ALTER TABLE ff_lane ADD CONSTRAINT ff_lane_rate CHECK (
            (rate_count IS NULL) = (rate_interval IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL));
    END IF;
END
$$;
-- +goose StatementEnd

-- A key of a lane: its running limit, rate limit and weight, and its
-- turn (served_at: the last claim that took turns with it). The key ''
-- stands for the lane's unkeyed executions, which take turns as one key.
-- claim_token marks the keys a claim locked, for its second statement.
-- A key an operator configured (SetKey) stays; one that only its
-- executions named is forgotten by the sweep once it is idle, so that
-- the turn order holds the keys with work.
CREATE TABLE IF NOT EXISTS ff_key (
    lane          text             NOT NULL CHECK (lane ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    key           text             NOT NULL CHECK (octet_length(key) <= 256),
    max_running   integer          CHECK (max_running >= 1),
    rate_count    integer          CHECK (rate_count >= 1),
    rate_interval interval         CHECK (rate_interval >= '1 millisecond' AND rate_interval <= '1 day'),
    rate_burst    integer          CHECK (rate_burst >= 1),
    tokens        double precision,
    tokens_at     timestamptz,
    weight        integer          NOT NULL DEFAULT 1 CHECK (weight BETWEEN 1 AND 1000),
    served_at     timestamptz      NOT NULL DEFAULT '-infinity',
    configured    boolean          NOT NULL DEFAULT false,
    claim_token   uuid,
    created_at    timestamptz      NOT NULL DEFAULT now(),
    updated_at    timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (lane, key),
    CONSTRAINT ff_key_rate CHECK (
        (rate_count IS NULL) = (rate_interval IS NULL) AND (rate_count IS NULL) = (rate_burst IS NULL)),
    CONSTRAINT ff_key_unkeyed CHECK (key <> '' OR (max_running IS NULL AND rate_count IS NULL))
);
-- Turn order: the keys least recently served first.
CREATE INDEX IF NOT EXISTS ff_key_turn ON ff_key (lane, served_at, key);

-- +goose Down
DROP TABLE IF EXISTS ff_key;
ALTER TABLE ff_lane DROP CONSTRAINT IF EXISTS ff_lane_rate;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS tokens_at;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS tokens;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS rate_burst;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS rate_interval;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS rate_count;
ALTER TABLE ff_lane DROP COLUMN IF EXISTS keyed;
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_live_keyed;
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_claim_keyed;
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_claim_all
    ON ff_execution (lane, priority DESC, run_at, execution_id) WHERE state = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_claim;
ALTER INDEX IF EXISTS ff_execution_claim_all RENAME TO ff_execution_claim;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_concurrency_key;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS concurrency_key;
