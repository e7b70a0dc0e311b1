-- +goose Up
-- Sub-flows, compensation and versions (docs/workflows.md). None of it
-- touches a flow or an execution that does not use it: the new columns
-- are NULL for them, and the daemon finds the flows that do through
-- partial indexes that hold only those still in progress.

-- A sub-flow step: a member of its parent flow whose body is a flow.
-- The step waits like any other; when it may run, the daemon starts its
-- child (on the parent's partition, so every statement that links the
-- two reads one partition) and holds the step running until the child
-- ends, then ends the step as the child ended. template is the child's
-- submission, in the schedules' params format.
CREATE TABLE IF NOT EXISTS ff_subflow (
    partition_key  smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    flow_id        uuid        NOT NULL,   -- the parent flow
    execution_id   uuid        NOT NULL,   -- the step
    template       jsonb       NOT NULL,
    rerun_of_child uuid,                   -- a rerun step's old child, carried over when it starts
    child_flow_id  uuid,                   -- set when the step starts its child
    started_at     timestamptz,
    ended_at       timestamptz,            -- the step ended, and so has the child
    PRIMARY KEY (partition_key, flow_id, execution_id)
);
-- The sub-flows still in progress: the daemon's pass reads only these.
CREATE INDEX IF NOT EXISTS ff_subflow_live ON ff_subflow (partition_key, execution_id) WHERE ended_at IS NULL;

-- A flow that is the body of a sub-flow step names it.
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS parent_execution_id uuid;

-- The compensating step of a completed step, and the flow's on-failure
-- step (step ''): what runs if the flow fails or is cancelled.
CREATE TABLE IF NOT EXISTS ff_compensation (
    partition_key smallint NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    flow_id       uuid     NOT NULL,
    step          text     NOT NULL,
    params        jsonb    NOT NULL,
    PRIMARY KEY (partition_key, flow_id, step)
);

-- compensation: NULL for a flow without compensations; 'armed' while
-- they may be needed; 'started' once the compensation flow
-- (compensation_flow_id) was submitted; 'not_needed' for a flow that
-- completed. compensation_of names, on a compensation flow, the flow it
-- compensates.
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS compensation text
    CHECK (compensation IN ('armed', 'started', 'not_needed'));
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS compensation_flow_id uuid;
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS compensation_of uuid;
-- The armed flows that finished: the daemon's compensation pass reads
-- only these. And every armed flow: while there is one, the daemon
-- watches completions for it.
CREATE INDEX IF NOT EXISTS ff_flow_compensate ON ff_flow (partition_key, flow_id)
    WHERE compensation = 'armed' AND state <> 'open';
CREATE INDEX IF NOT EXISTS ff_flow_armed ON ff_flow (partition_key, flow_id) WHERE compensation = 'armed';

-- The versions of handler sets that workers serve. A worker announces
-- its own when it starts (or an operator adds one); a create or a flow
-- that names a version nobody announced is refused: it looks the
-- version up here (no foreign key: on Citus a distributed table's key
-- into a reference table must exist before either is placed, which an
-- upgrade of a placed schema cannot arrange). An execution carries its
-- version as a capability its worker must have ('ffd.version:' and the
-- version, in required_capabilities), so the claim needs no test of its
-- own.
CREATE TABLE IF NOT EXISTS ff_version (
    namespace     text        NOT NULL,
    version       text        NOT NULL CHECK (length(version) BETWEEN 1 AND 64 AND version ~ '^[A-Za-z0-9_.:+-]+$'),
    announced_at  timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, version)
);
ALTER TABLE ff_flow ADD COLUMN IF NOT EXISTS version text
    CHECK (version IS NULL OR (length(version) BETWEEN 1 AND 64 AND version ~ '^[A-Za-z0-9_.:+-]+$'));

-- +goose Down
ALTER TABLE ff_flow DROP COLUMN IF EXISTS version;
DROP TABLE IF EXISTS ff_version;
DROP INDEX IF EXISTS ff_flow_armed;
DROP INDEX IF EXISTS ff_flow_compensate;
ALTER TABLE ff_flow DROP COLUMN IF EXISTS compensation_of;
ALTER TABLE ff_flow DROP COLUMN IF EXISTS compensation_flow_id;
ALTER TABLE ff_flow DROP COLUMN IF EXISTS compensation;
DROP TABLE IF EXISTS ff_compensation;
ALTER TABLE ff_flow DROP COLUMN IF EXISTS parent_execution_id;
DROP TABLE IF EXISTS ff_subflow;
