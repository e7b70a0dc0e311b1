-- +goose Up
-- One sequence numbers the events of both outboxes, so that (txid,
-- event_id) orders the merged stream with no ties and a consumer of both
-- keeps a single cursor.
CREATE SEQUENCE ff_outbox_event_id_seq AS bigint;
SELECT setval('ff_outbox_event_id_seq', greatest(
    (SELECT coalesce(max(event_id), 0) FROM ff_completion_event),
    (SELECT coalesce(max(event_id), 0) FROM ff_lease_event), 1));
ALTER TABLE ff_completion_event ALTER COLUMN event_id DROP IDENTITY;
ALTER TABLE ff_completion_event ALTER COLUMN event_id SET DEFAULT nextval('ff_outbox_event_id_seq');
ALTER TABLE ff_lease_event ALTER COLUMN event_id DROP IDENTITY;
ALTER TABLE ff_lease_event ALTER COLUMN event_id SET DEFAULT nextval('ff_outbox_event_id_seq');
ALTER SEQUENCE ff_outbox_event_id_seq OWNED BY ff_completion_event.event_id;

-- Retention and idle-consumer reports read cursors by stream.
ALTER TABLE ff_outbox_consumer ADD COLUMN last_read_at timestamptz NOT NULL DEFAULT now();

-- The WAL stream: inserts into both outboxes, in commit order, through
-- logical replication (pgoutput).
CREATE PUBLICATION ff_outbox FOR TABLE ff_completion_event, ff_lease_event WITH (publish = 'insert');

-- +goose Down
DROP PUBLICATION ff_outbox;
ALTER TABLE ff_outbox_consumer DROP COLUMN last_read_at;
ALTER TABLE ff_lease_event ALTER COLUMN event_id DROP DEFAULT;
ALTER TABLE ff_completion_event ALTER COLUMN event_id DROP DEFAULT;
ALTER SEQUENCE ff_outbox_event_id_seq OWNED BY NONE;
DROP SEQUENCE ff_outbox_event_id_seq;
ALTER TABLE ff_completion_event ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY;
ALTER TABLE ff_lease_event ALTER COLUMN event_id ADD GENERATED ALWAYS AS IDENTITY;
