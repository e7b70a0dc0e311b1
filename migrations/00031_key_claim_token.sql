-- +goose NO TRANSACTION
-- +goose Up
-- The controlled claim finds the keys its turn statement locked by the
-- claim's token (ff_key.claim_token, written on every key served). With
-- no index on it, that was a read of every key of the lane (on a small
-- ff_key, of the whole table) in every keyed claim: 0.2 ms a claim at
-- 1,000 keys (auto_explain), and linear in the lane's keys. The index
-- makes it a read of the keys the claim locked. Built concurrently: a
-- deployment's ff_key may be large and in use.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_key_claim_token ON ff_key (claim_token) WHERE claim_token IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_key_claim_token;
