-- +goose Up
-- Inserting executions wakes their lanes' workers once per statement and
-- lane, not once per row: a batch create of 1,000 pending executions ran
-- the row trigger 1,000 times (Postgres folded the identical
-- notifications, but each call still cost). The update trigger stays per
-- row: its WHEN clause lets only rows that become claimable reach it, and a
-- statement trigger on updates would capture every claimed and completed
-- row in a transition table.

-- +goose StatementBegin
CREATE FUNCTION ff_notify_ready_batch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_ready', l.lane)
    FROM (SELECT DISTINCT lane FROM new_executions WHERE state = 'pending' AND run_at <= now()) l;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER ff_execution_ready_insert ON ff_execution;
CREATE TRIGGER ff_execution_ready_insert AFTER INSERT ON ff_execution
    REFERENCING NEW TABLE AS new_executions
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_ready_batch();

-- +goose Down
DROP TRIGGER ff_execution_ready_insert ON ff_execution;
CREATE TRIGGER ff_execution_ready_insert AFTER INSERT ON ff_execution
    FOR EACH ROW WHEN (NEW.state = 'pending' AND NEW.run_at <= now())
    EXECUTE FUNCTION ff_notify_ready();
DROP FUNCTION ff_notify_ready_batch();
