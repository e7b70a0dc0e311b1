// Package outbox serves downstream consumers of ff_completion_event and
// ff_lease_event (docs/design.md section 7).
//
// Event ids are assigned at insert, but transactions commit out of order:
// a reader that keeps "the last event id I saw" skips, for good, the event
// of a transaction that took its id earlier and committed later. The
// cursor protocol here never does. It orders events by (txid, event_id)
// and reads only transactions older than the oldest one still running
// (txid < pg_snapshot_xmin(pg_current_snapshot())): every transaction
// below that horizon has committed or aborted, so nothing can appear behind
// the cursor later. Both outboxes draw event ids from one sequence, so the
// merged stream has no ties.
//
// Named consumers keep their cursor in ff_outbox_consumer. Run hands each
// batch to the consumer together with the transaction that advances the
// cursor: a consumer writing to the same database gets exactly-once
// processing, since its work and its ack commit or roll back together.
//
// The WAL stream (WALStream) follows both outboxes through a logical
// replication slot (pgoutput, publication ff_outbox), in commit order,
// resuming from the slot's confirmed position. Delivery is at-least-once:
// a crash between handling and acknowledging replays the same events, with
// the same ids.
package outbox
