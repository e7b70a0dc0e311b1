-- +goose Up
-- Schedules: cron-like rules the daemon fires, creating an execution or
-- submitting a flow per tick. A tick is fired by the transaction that
-- holds the schedule's row lock and moves next_run_at past it, and what it
-- creates carries an id derived from (name, tick): an idempotency key for
-- an execution, the flow id for a flow. So a tick fires once however many
-- daemons run, and a crash between the two cannot fire it twice.
CREATE TABLE ff_schedule (
    name        text        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_.:-]{1,128}$'),
    namespace   text        NOT NULL DEFAULT 'default',
    spec        text        NOT NULL CHECK (length(spec) BETWEEN 1 AND 256),
    timezone    text        NOT NULL DEFAULT 'UTC',
    target      text        NOT NULL CHECK (target IN ('execution', 'flow')),
    params      jsonb       NOT NULL,
    missed      text        NOT NULL DEFAULT 'latest' CHECK (missed IN ('latest', 'skip', 'all')),
    paused      boolean     NOT NULL DEFAULT false,
    next_run_at timestamptz NOT NULL,
    last_run_at timestamptz,
    fired       bigint      NOT NULL DEFAULT 0 CHECK (fired >= 0),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX ff_schedule_due ON ff_schedule (next_run_at) WHERE NOT paused;

-- +goose Down
DROP TABLE IF EXISTS ff_schedule;
