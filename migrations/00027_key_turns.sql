-- +goose Up
-- Weights across claims (docs/flow-control.md, "Rounds and weights"): a
-- key's turn lasts until it has started as many executions as its
-- weight, over as many claims as that takes. turn_used counts the starts
-- of the key's current turn; the key keeps its place in the turn order
-- (served_at) until its turn is used up. Without it a claim of one slot
-- (a worker of concurrency 1, or one slot free) ended every key's turn
-- after one start, whatever its weight.
ALTER TABLE ff_key ADD COLUMN IF NOT EXISTS turn_used integer NOT NULL DEFAULT 0 CHECK (turn_used >= 0);

-- +goose Down
ALTER TABLE ff_key DROP COLUMN IF EXISTS turn_used;
