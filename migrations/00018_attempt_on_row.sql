-- +goose Up
-- The write diet (docs/design.md §5, "Attempts"): an execution's running or
-- last attempt lives on its own row, and ff_attempt holds a row only for an
-- attempt that ended with the execution put back to pending (a retry, an
-- expiry with attempts left, a revocation). An execution that succeeds on
-- its first attempt writes no attempt row at all. The attempt on the row
-- is there while attempt_started_at is set:
--   * attempt_worker, attempt_started_at: who runs (ran) it, since when;
--   * ended: terminal_at; outcome and error follow from the terminal state
--     (ff_attempt_all below spells the mapping out).
-- Every attempt is still readable in one place: the view ff_attempt_all.
ALTER TABLE ff_execution
    ADD COLUMN IF NOT EXISTS attempt_worker     text,
    ADD COLUMN IF NOT EXISTS attempt_started_at timestamptz;

-- A running execution's open attempt row moves onto the execution. Rows of
-- attempts that already ended stay where they are: an execution whose
-- last attempt is a row has attempt_started_at NULL, and reads the same.
UPDATE ff_execution e SET attempt_worker = a.worker, attempt_started_at = a.started_at
FROM ff_attempt a
WHERE e.state = 'running' AND a.partition_key = e.partition_key AND a.execution_id = e.execution_id
    AND a.attempt = e.attempt AND a.outcome IS NULL;
DELETE FROM ff_attempt a USING ff_execution e
WHERE e.state = 'running' AND a.partition_key = e.partition_key AND a.execution_id = e.execution_id
    AND a.attempt = e.attempt AND a.outcome IS NULL;

ALTER TABLE ff_execution ADD CONSTRAINT ff_execution_attempt_held
    CHECK ((attempt_worker IS NULL) = (attempt_started_at IS NULL)
        AND (state <> 'running' OR attempt_started_at IS NOT NULL)) NOT VALID;
ALTER TABLE ff_execution VALIDATE CONSTRAINT ff_execution_attempt_held;

-- Every attempt of every execution, first first within each: the rows of
-- ff_attempt and the one held on the execution row. The held attempt's
-- epoch is the row's, less the bump that fenced it when it was taken away
-- (cancelled or expired while running); its outcome and error follow from
-- the terminal state, NULL while it runs.
CREATE OR REPLACE VIEW ff_attempt_all AS
SELECT partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome, error
FROM ff_attempt
UNION ALL
SELECT partition_key, execution_id, attempt,
    lease_epoch - CASE WHEN state IN ('cancelled', 'expired') THEN 1 ELSE 0 END,
    attempt_worker, attempt_started_at, terminal_at,
    CASE state WHEN 'completed' THEN 'succeeded' WHEN 'failed' THEN 'failed'
        WHEN 'expired' THEN 'timed_out' WHEN 'cancelled' THEN 'cancelled' END,
    CASE WHEN state IN ('failed', 'expired') THEN last_error
        WHEN state = 'cancelled' THEN cancellation_reason END
FROM ff_execution
WHERE attempt_started_at IS NOT NULL;

-- +goose Down
-- The held attempts become rows again (open for running executions,
-- ended for the others), read through the view before it goes.
INSERT INTO ff_attempt (partition_key, execution_id, attempt, lease_epoch, worker, started_at, ended_at, outcome, error)
SELECT v.partition_key, v.execution_id, v.attempt, v.lease_epoch, v.worker, v.started_at, v.ended_at, v.outcome, v.error
FROM ff_attempt_all v
JOIN ff_execution e ON e.partition_key = v.partition_key AND e.execution_id = v.execution_id
WHERE e.attempt_started_at IS NOT NULL AND v.attempt = e.attempt
ON CONFLICT DO NOTHING;
DROP VIEW IF EXISTS ff_attempt_all;
ALTER TABLE ff_execution DROP CONSTRAINT IF EXISTS ff_execution_attempt_held;
ALTER TABLE ff_execution DROP COLUMN IF EXISTS attempt_started_at, DROP COLUMN IF EXISTS attempt_worker;
