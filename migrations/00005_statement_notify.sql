-- +goose Up
-- One notification per statement instead of one per event row: a batch of
-- claims or completions wrote one lease or completion event per execution,
-- each running a row trigger and queueing a NOTIFY with a distinct payload
-- that every listener then had to read. The statement triggers below see
-- the statement's new rows (a transition table) and send one NOTIFY
-- naming the range of their ids, "lo-hi", or "id" for one. The range may
-- include ids of other transactions' events; readers treat it as a hint
-- and filter (the daemon dispatches only undispatched events, loads only
-- leases still held). Completion events born dispatched (00004) are left
-- out of the range; a statement that wrote only those sends an empty
-- payload, a wake-up for consumers. A statement that wrote no row sends
-- nothing.

-- +goose StatementBegin
CREATE FUNCTION ff_notify_completion_batch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    lo bigint;
    hi bigint;
BEGIN
    SELECT count(*), min(event_id) FILTER (WHERE dispatched_at IS NULL), max(event_id) FILTER (WHERE dispatched_at IS NULL)
        INTO n, lo, hi FROM new_events;
    IF n = 0 THEN
        RETURN NULL;
    ELSIF lo IS NULL THEN
        PERFORM pg_notify('ff_completion', '');
    ELSIF lo = hi THEN
        PERFORM pg_notify('ff_completion', lo::text);
    ELSE
        PERFORM pg_notify('ff_completion', lo::text || '-' || hi::text);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

-- +goose StatementBegin
CREATE FUNCTION ff_notify_lease_batch() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    lo bigint;
    hi bigint;
BEGIN
    SELECT min(event_id), max(event_id) INTO lo, hi FROM new_events;
    IF lo IS NULL THEN
        RETURN NULL;
    ELSIF lo = hi THEN
        PERFORM pg_notify('ff_lease', lo::text);
    ELSE
        PERFORM pg_notify('ff_lease', lo::text || '-' || hi::text);
    END IF;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER ff_completion_event_notify ON ff_completion_event;
CREATE TRIGGER ff_completion_event_notify AFTER INSERT ON ff_completion_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_completion_batch();

DROP TRIGGER ff_lease_event_notify ON ff_lease_event;
CREATE TRIGGER ff_lease_event_notify AFTER INSERT ON ff_lease_event
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION ff_notify_lease_batch();

-- +goose Down
DROP TRIGGER ff_completion_event_notify ON ff_completion_event;
CREATE TRIGGER ff_completion_event_notify AFTER INSERT ON ff_completion_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_completion();
DROP TRIGGER ff_lease_event_notify ON ff_lease_event;
CREATE TRIGGER ff_lease_event_notify AFTER INSERT ON ff_lease_event
    FOR EACH ROW EXECUTE FUNCTION ff_notify_lease();
DROP FUNCTION ff_notify_completion_batch(), ff_notify_lease_batch();
