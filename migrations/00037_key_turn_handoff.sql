-- +goose NO TRANSACTION
-- +goose Up
-- A keyed claim's turn statement hands the keys it locked to the claim
-- statement through a transaction-local setting, no longer by writing
-- the claim's token into each key's row; ff_key.claim_token's index only
-- cost an entry per key served. The column stays, unused, so that a
-- binary from before this migration still claims correctly during an
-- upgrade (reading the lane's keys without the index); a later migration
-- drops it. Dropped concurrently: a deployment's ff_key may be in use.
DROP INDEX CONCURRENTLY IF EXISTS ff_key_claim_token;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_key_claim_token ON ff_key (claim_token) WHERE claim_token IS NOT NULL;
