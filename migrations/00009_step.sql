-- +goose NO TRANSACTION
-- +goose Up
-- A flow member's step name (SubmitNode.Ref, or CreateParams.Step when a
-- member is created later): what `ffd flow show`, `exec list`, logs and
-- events call it, and how a step finds its upstreams by name. Unique in
-- its flow. Adding a nullable column without a default rewrites nothing.
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS step text;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_step;
ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_step
    CHECK (step IS NULL OR (flow_id IS NOT NULL AND length(step) BETWEEN 1 AND 128)) NOT VALID;
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_step;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_flow_step ON ff_execution (partition_key, flow_id, step)
    WHERE step IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_flow_step;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_step;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS step;
