// Package outbox will serve downstream consumers of ff_completion_event and
// ff_lease_event: the gap-free (txid, event_id) cursor, named consumers, the
// WAL stream and retention (SPEC section 10). Built by the outbox issue.
package outbox
