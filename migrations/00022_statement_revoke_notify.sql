-- +goose Up
-- The ff_revoke notifications (migration 00003: one per lease revoked or
-- expired, "partition_key:execution_id:lease_epoch") are sent by the lease
-- outbox's statement trigger, from its transition table, instead of by a
-- trigger per row: a cancel_flow that takes 500 running leases away ran
-- 500 trigger calls (1.6-2.3 ms of its 30). Payloads, channel and the
-- ff_lease notification are unchanged; notifications of one statement
-- still go out in the order of its rows, at commit.

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_lease_batch() RETURNS trigger LANGUAGE plpgsql AS $$
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
    PERFORM pg_notify('ff_revoke', partition_key::text || ':' || execution_id::text || ':' || lease_epoch::text)
    FROM new_events
    WHERE event_type IN ('revoked', 'expired')
    ORDER BY event_id;
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

DROP TRIGGER IF EXISTS ff_lease_event_revoke_notify ON ff_lease_event;

-- +goose Down
CREATE TRIGGER ff_lease_event_revoke_notify AFTER INSERT ON ff_lease_event
    FOR EACH ROW WHEN (NEW.event_type IN ('revoked', 'expired'))
    EXECUTE FUNCTION ff_notify_revoke();

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION ff_notify_lease_batch() RETURNS trigger LANGUAGE plpgsql AS $$
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
