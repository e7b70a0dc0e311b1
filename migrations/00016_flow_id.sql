-- +goose NO TRANSACTION
-- +goose Up
-- Flows in id order across namespaces: the console's flows list (and
-- ListFlows without a namespace) reads it in order and stops at the page,
-- instead of sorting every flow. One entry per flow, written once.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_flow_id ON ff_flow (flow_id);

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_flow_id;
