-- +goose NO TRANSACTION
-- +goose Up
-- Durable waits and signals, and steps added at run time
-- (docs/workflows.md). A step ends an attempt
-- in a wait: its execution goes back to pending with run_at at the
-- wait's end (a sleep's, or a signal wait's timeout), holding no lease,
-- and a signal sent to it or its flow brings run_at to now. The wait is
-- recorded on the row; the attempt that ended in it is an ff_attempt row
-- with outcome 'waited' and does not count against max_attempts (the
-- retry budget is attempt - waits).
--
-- A wait is current while the execution is pending at the attempt that
-- began it (wait_attempt = attempt); the columns stay after it, so that
-- the attempts that follow (retries included) can read what woke them,
-- until the next wait replaces them.
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS waits integer NOT NULL DEFAULT 0;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS wait_for text;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS wait_signal text;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS wait_until timestamptz;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS wait_attempt integer;
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS woken_by uuid;
-- A step added at run time (a spawn) names the step that added it.
ALTER TABLE ff_execution ADD COLUMN IF NOT EXISTS spawned_by uuid;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_wait;
ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_wait CHECK (
    waits BETWEEN 0 AND attempt
    AND (wait_for IS NULL OR wait_for IN ('sleep', 'signal'))
    AND (wait_for IS NULL) = (wait_attempt IS NULL)
    AND (wait_attempt IS NULL OR wait_attempt BETWEEN 1 AND attempt)
    AND (wait_signal IS NOT NULL) = (wait_for IS NOT DISTINCT FROM 'signal')
    AND (wait_signal IS NULL OR (length(wait_signal) BETWEEN 1 AND 128 AND wait_signal ~ '^[A-Za-z0-9_.:-]+$'))
    AND (wait_for IS DISTINCT FROM 'sleep' OR wait_until IS NOT NULL)
    AND (woken_by IS NULL OR wait_for = 'signal')) NOT VALID;
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_wait;

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

-- A signal to a flow wakes the first of its members that wait for it.
CREATE INDEX CONCURRENTLY IF NOT EXISTS ff_execution_waiting ON ff_execution (partition_key, flow_id, wait_signal)
    WHERE state = 'pending' AND wait_signal IS NOT NULL AND woken_by IS NULL;

-- +goose Down
DROP INDEX CONCURRENTLY IF EXISTS ff_execution_waiting;
DROP TABLE IF EXISTS ff_signal;
ALTER TABLE ff_lease_event DROP CONSTRAINT IF EXISTS ff_lease_event_event_type_check;
ALTER TABLE ff_lease_event ADD CONSTRAINT ff_lease_event_event_type_check
    CHECK (event_type IN ('acquired', 'renewed', 'released', 'expired', 'revoked')) NOT VALID;
ALTER TABLE ff_attempt DROP CONSTRAINT IF EXISTS ff_attempt_outcome_check;
ALTER TABLE ff_attempt ADD CONSTRAINT ff_attempt_outcome_check
    CHECK (outcome IN ('succeeded', 'failed', 'timed_out', 'cancelled', 'revoked')) NOT VALID;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_wait;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS spawned_by;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS woken_by;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS wait_attempt;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS wait_until;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS wait_signal;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS wait_for;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS waits;
