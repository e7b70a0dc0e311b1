-- +goose NO TRANSACTION
-- +goose Up
-- Dead letters: solo executions that ended failed or expired and were
-- not rerun (docs/intake.md, "Dead letters"). The index holds only such
-- endings, in id order (the order `ffd dead list` pages in), so listing
-- them reads the dead letters and not the table. An execution enters it
-- once, when it ends failed or expired: an update that changes its state,
-- which no HOT update could be. Other rows never match its predicate, so
-- the claim and completion paths write nothing to it. Built concurrently:
-- ff_execution may be large and in use.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_dead ON ff_execution (execution_id)
    WHERE flow_id IS NULL AND state IN ('failed', 'expired');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_dead;
