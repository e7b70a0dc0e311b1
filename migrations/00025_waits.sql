-- +goose NO TRANSACTION
-- +goose Up
-- Durable waits and signals, and steps added at run time
-- (docs/workflows.md). Each statement commits on its own, so that a
-- check is validated on a large table without holding the lock that
-- added it. A step ends an attempt in a wait: its execution
-- goes back to pending with run_at at the wait's end (a sleep's, or a
-- signal wait's timeout), holding no lease, and a signal sent to it or
-- its flow brings run_at to now. The attempt that ended in the wait is
-- an ff_attempt row with outcome 'waited' and does not count against
-- max_attempts (the retry budget is attempt - ff_wait.waits).
--
-- What a wait waits for lives in ff_wait, a row per execution that ever
-- waited, not in ff_execution: every claim and completion rewrites an
-- execution row and checks its constraints, and the engine's throughput
-- measured 3 to 7 % lower with these columns, their check and their
-- index on ff_execution (docs/benchmarks.md).
--
-- A wait is current while the execution is pending at the attempt that
-- began it (wait_attempt = ff_execution.attempt), not yet woken and not
-- yet due; the row stays after it, so that the attempts that follow
-- (retries included) can read what woke them, until the next wait
-- replaces it.
CREATE TABLE IF NOT EXISTS ff_wait (
    partition_key smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    execution_id  uuid        NOT NULL,
    flow_id       uuid,
    waits         integer     NOT NULL CHECK (waits >= 1),
    wait_for      text        NOT NULL CHECK (wait_for IN ('sleep', 'signal')),
    wait_signal   text        CHECK (length(wait_signal) BETWEEN 1 AND 128 AND wait_signal ~ '^[A-Za-z0-9_.:-]+$'),
    wait_until    timestamptz,
    wait_attempt  integer     NOT NULL CHECK (wait_attempt >= 1),
    woken_by      uuid,
    began_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (partition_key, execution_id),
    CONSTRAINT ff_wait_signal CHECK ((wait_for = 'signal') = (wait_signal IS NOT NULL)),
    CONSTRAINT ff_wait_sleep CHECK (wait_for = 'signal' OR wait_until IS NOT NULL),
    CONSTRAINT ff_wait_woken CHECK (woken_by IS NULL OR wait_for = 'signal')
);
-- A signal to a flow wakes the first of its members that wait for it;
-- retention deletes a flow's waits with it.
CREATE INDEX IF NOT EXISTS ff_wait_flow ON ff_wait (partition_key, flow_id, wait_signal);

-- A step added at run time (a spawn) and the step that added it.
CREATE TABLE IF NOT EXISTS ff_spawned (
    partition_key smallint NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    flow_id       uuid     NOT NULL,
    execution_id  uuid     NOT NULL,
    spawned_by    uuid     NOT NULL,
    PRIMARY KEY (partition_key, flow_id, execution_id)
);

-- The attempt that ended in a wait, and the outbox's record of it: a
-- lease event 'suspended' when a step begins to wait (lease_expires_at:
-- when the wait ends by itself; NULL for a signal wait without timeout),
-- 'signalled' when a signal ends the wait.
ALTER TABLE ff_attempt DROP CONSTRAINT IF EXISTS ff_attempt_outcome_check;
ALTER TABLE ff_attempt ADD CONSTRAINT ff_attempt_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'revoked', 'waited')) NOT VALID;
ALTER TABLE ff_attempt VALIDATE CONSTRAINT ff_attempt_outcome_check;
ALTER TABLE ff_lease_event DROP CONSTRAINT IF EXISTS ff_lease_event_event_type_check;
ALTER TABLE ff_lease_event ADD CONSTRAINT ff_lease_event_event_type_check
    CHECK (event_type IN ('acquired', 'renewed', 'released', 'expired', 'revoked', 'suspended', 'signalled')) NOT VALID;
ALTER TABLE ff_lease_event VALIDATE CONSTRAINT ff_lease_event_event_type_check;

-- Signals: sent to a flow (execution_id NULL) or to an execution (with
-- its flow, if it has one), each kept until one wait takes it
-- (consumed_by), so that a signal sent before its wait begins is not
-- lost. Lives on the target's partition.
CREATE TABLE IF NOT EXISTS ff_signal (
    partition_key smallint    NOT NULL CHECK (partition_key BETWEEN 0 AND 255),
    signal_id     uuid        NOT NULL,
    flow_id       uuid,
    execution_id  uuid,
    name          text        NOT NULL CHECK (length(name) BETWEEN 1 AND 128 AND name ~ '^[A-Za-z0-9_.:-]+$'),
    payload       bytea       NOT NULL DEFAULT '',
    sent_at       timestamptz NOT NULL DEFAULT now(),
    consumed_by   uuid,
    consumed_at   timestamptz,
    PRIMARY KEY (signal_id, partition_key),
    CONSTRAINT ff_signal_target CHECK (flow_id IS NOT NULL OR execution_id IS NOT NULL),
    CONSTRAINT ff_signal_consumed CHECK ((consumed_by IS NULL) = (consumed_at IS NULL))
);
-- A wait takes the oldest signal for it still unconsumed.
CREATE INDEX IF NOT EXISTS ff_signal_unconsumed ON ff_signal (partition_key, name, signal_id)
    WHERE consumed_by IS NULL;
-- What a flow or an execution received (the console, retention).
CREATE INDEX IF NOT EXISTS ff_signal_target ON ff_signal (partition_key, flow_id, execution_id);


-- +goose Down
DROP TABLE IF EXISTS ff_signal;
DROP TABLE IF EXISTS ff_spawned;
DROP TABLE IF EXISTS ff_wait;
ALTER TABLE ff_lease_event DROP CONSTRAINT IF EXISTS ff_lease_event_event_type_check;
ALTER TABLE ff_lease_event ADD CONSTRAINT ff_lease_event_event_type_check
    CHECK (event_type IN ('acquired', 'renewed', 'released', 'expired', 'revoked')) NOT VALID;
ALTER TABLE ff_attempt DROP CONSTRAINT IF EXISTS ff_attempt_outcome_check;
ALTER TABLE ff_attempt ADD CONSTRAINT ff_attempt_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'revoked')) NOT VALID;
