-- +goose Up
-- A flow member's completion event carries its step name, so that a
-- consumer reading the outbox (by cursor or from the WAL) knows which step
-- ended without a lookup that retention may have made impossible. NULL for
-- solo executions and for flows' own events. A nullable column without a
-- default rewrites nothing.
ALTER TABLE ff_completion_event ADD COLUMN IF NOT EXISTS step text;

-- +goose Down
ALTER TABLE ff_completion_event DROP COLUMN IF EXISTS step;
