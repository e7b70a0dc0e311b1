// Package trigger starts executions and flows from published events
// (docs/workflows.md, "Flows started by events").
//
// A trigger names an event and a target: an execution to create or a
// flow to submit, stored in the schedules' params format and checked in
// full when the trigger is created, so a bad template is refused then,
// not when an event comes. Publishing an event (Publish, or the SQL
// function ff_publish_event in the publisher's own transaction) writes
// one row on the partition of its key; a key published again is the same
// event. The daemon fires events (Fire): it locks unfired rows SKIP
// LOCKED, starts the target of every matching trigger, and marks the
// event fired, in one transaction. What a firing starts carries an id
// derived from (trigger, event): an idempotency key for an execution, the
// flow id for a flow. So each event starts each trigger's target once,
// however many daemons run and wherever one dies.
package trigger
