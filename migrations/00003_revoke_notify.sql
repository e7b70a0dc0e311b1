-- +goose Up
-- A lease taken away from its holder (cancelled, expired, revoked by an
-- operator, lost to a sibling) wakes the holding worker on ff_revoke, so
-- that its handler is cancelled at once instead of at its next heartbeat.
-- The payload names the execution and the epoch it was held at:
-- "partition_key:execution_id:lease_epoch". Only these rare events notify
-- here; acquired, renewed and released leases do not.

-- +goose StatementBegin
CREATE FUNCTION ff_notify_revoke() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('ff_revoke', NEW.partition_key::text || ':' || NEW.execution_id::text || ':' || NEW.lease_epoch::text);
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER ff_lease_event_revoke_notify AFTER INSERT ON ff_lease_event
    FOR EACH ROW WHEN (NEW.event_type IN ('revoked', 'expired'))
    EXECUTE FUNCTION ff_notify_revoke();

-- +goose Down
DROP TRIGGER ff_lease_event_revoke_notify ON ff_lease_event;
DROP FUNCTION ff_notify_revoke();
