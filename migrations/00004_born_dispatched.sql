-- +goose Up
-- A completion event with nothing to cascade (a solo execution's, or a
-- flow's own) is written already dispatched (internal/leases, internal/
-- flows), so the daemon no longer locks and updates one row per such
-- event. Its NOTIFY carries no event id: the daemon has nothing to do for
-- it, and Postgres folds the identical empty payloads of one transaction
-- into a single wake-up for consumers. Events that must cascade notify
-- with their id, as before.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_completion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.dispatched_at IS NULL THEN
        PERFORM pg_notify('ff_completion', NEW.event_id::text);
    ELSE
        PERFORM pg_notify('ff_completion', '');
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_completion() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_completion', NEW.event_id::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd
