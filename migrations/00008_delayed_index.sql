-- +goose NO TRANSACTION
-- +goose Up
-- ff_execution_delayed held every pending row, so the planner could serve
-- a claim from it: with statistics gathered while few rows were pending
-- (ANALYZE after a busy hour), it read all pending rows of every lane by
-- run_at and sorted them, 5-20 ms per claim, instead of reading the claim
-- index in order and stopping at the LIMIT (0.1 ms). Its only readers are
-- the daemon's timers for delayed rows, which never need a row that was due
-- when written (run_at = created_at: the insert's ff_ready already told the
-- workers). The new predicate leaves those rows out, which no claim can
-- imply, and saves an index entry per plain create.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_later ON ff_execution (run_at)
    WHERE state = 'pending' AND run_at > created_at;
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_delayed;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_delayed ON ff_execution (run_at) WHERE state = 'pending';
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_later;
