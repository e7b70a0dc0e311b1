-- +goose NO TRANSACTION
-- +goose Up
-- Whether a flow has members still to run is asked at every member's end.
-- Through ff_execution_flow the probe walked the flow's finished members
-- before reaching a live one, so a flow of N members cost O(N^2) over its
-- life (10,000 members: ~11 s of a 13 s run). This index holds only live
-- members of flows, so the probe reads one entry; solo executions and
-- finished members are never in it. CONCURRENTLY: the table may be large
-- and in service while this runs.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_flow_live ON ff_execution (partition_key, flow_id)
    WHERE flow_id IS NOT NULL AND state IN ('blocked', 'pending', 'running');

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_flow_live;
