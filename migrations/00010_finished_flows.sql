-- +goose NO TRANSACTION
-- +goose Up
-- Finished flows by the time they finished, for the daemon's retention
-- (it deletes flows, with their members, edges and groups, once they are
-- older than the configured age). A flow writes it once, when it ends.
-- Solo executions need no such index: their uuids are time-ordered (v7),
-- so retention walks ff_execution_list up to the cutoff's uuid instead of
-- adding an index entry to every terminal transition.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_flow_finished ON ff_flow (terminal_at) WHERE state <> 'open';

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_flow_finished;
