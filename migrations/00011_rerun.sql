-- +goose NO TRANSACTION
-- +goose Up
-- Reruns. A rerun is new rows linked to the old ones, which stay as they
-- were: a terminal state is final. rerun_of names the flow, or the
-- execution, this one reruns (no foreign key: retention may delete the
-- original first). Each is rerun at most once; to try again, rerun the
-- rerun. Both columns are NULL for everything else, so the partial
-- indexes cost nothing outside reruns.
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS rerun_of uuid;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS rerun_of uuid;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_flow_rerun ON ff_flow (rerun_of) WHERE rerun_of IS NOT NULL;
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_rerun ON ff_execution (rerun_of) WHERE rerun_of IS NOT NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_rerun;
DROP INDEX CONCURRENTLY IF EXISTS ff_flow_rerun;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS rerun_of;
ALTER TABLE ff_flow DROP COLUMN IF EXISTS rerun_of;
