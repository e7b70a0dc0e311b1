package store

import "github.com/flowfabric/ffd/ffdtype"

// The schema's vocabulary, defined once: the sets callers read (states,
// outcomes, join policies) are ffdtype's, the ones only the machinery
// uses are here. Each set is exactly the set a CHECK constraint allows
// (names_test.go compares them with a migrated database), and the
// mappings between them (ffdtype.OutcomeOf, AttemptOutcomeOf, LeaseEndOf)
// are computed in Go and passed to SQL as parameters, so no statement
// spells a mapping of its own.

// AttemptOutcomeOf is how the running attempt of an execution that ended
// in s ends: a lease taken away by expiry (or a skip, which never meets a
// running attempt) times the attempt out. Since migration 00018 that
// attempt stays on the execution row and the view ff_attempt_all spells
// this mapping out in SQL; TestHeldAttemptsReadAsTheMappingSays keeps the
// two equal.
func AttemptOutcomeOf(s ffdtype.State) ffdtype.AttemptOutcome {
	switch s {
	case ffdtype.StateCompleted:
		return ffdtype.AttemptSucceeded
	case ffdtype.StateFailed:
		return ffdtype.AttemptFailed
	case ffdtype.StateCancelled:
		return ffdtype.AttemptCancelled
	}
	return ffdtype.AttemptTimedOut
}

// LeaseEventType is a lease event's type (ff_lease_event.event_type).
type LeaseEventType string

// Lease event types.
const (
	LeaseAcquired LeaseEventType = "acquired"
	LeaseRenewed  LeaseEventType = "renewed"
	LeaseReleased LeaseEventType = "released"
	LeaseExpired  LeaseEventType = "expired"
	LeaseRevoked  LeaseEventType = "revoked"
	// A step began a wait (lease_expires_at: when it ends by itself).
	LeaseSuspended LeaseEventType = "suspended"
	// A signal ended a step's wait (worker: empty).
	LeaseSignalled LeaseEventType = "signalled"
)

// LeaseEventTypes lists every lease event type.
var LeaseEventTypes = []LeaseEventType{LeaseAcquired, LeaseRenewed, LeaseReleased, LeaseExpired, LeaseRevoked, LeaseSuspended, LeaseSignalled}

// LeaseEndOf is the lease event of a running execution that ended in s:
// its holder released it (complete, fail), the engine revoked it
// (cancel), or it lapsed (expiry).
func LeaseEndOf(s ffdtype.State) LeaseEventType {
	switch s {
	case ffdtype.StateCancelled:
		return LeaseRevoked
	case ffdtype.StateExpired:
		return LeaseExpired
	}
	return LeaseReleased
}

// Notification channels the writers send on, from the session that
// committed (notice.go; docs/schema.md, Notifications). Payloads are
// hints: nothing relies on one arriving. Items are comma-separated.
const (
	// ChannelCompletion carries the partitions holding completion events
	// to dispatch, or nothing (an outbox consumer's wake-up).
	ChannelCompletion = "ff_completion"
	// ChannelLease carries the partitions of lease events written, and
	// DuePrefix and a time (Unix milliseconds) at which executions put
	// back to pending for later come due (a retry after backoff).
	ChannelLease = "ff_lease"
	// ChannelReady carries lanes that have work due.
	ChannelReady = "ff_ready"
	// ChannelRevoke carries partition:execution_id:epoch of each running
	// lease taken away (cancel, revoke, expiry); epoch 0 is whichever
	// attempt runs.
	ChannelRevoke = "ff_revoke"
	// ChannelEvent carries nothing when an event was published
	// (docs/workflows.md, "Flows started by events"), and EventSubflow
	// when sub-flow steps may start.
	ChannelEvent = "ff_event"
)

// SubflowLane is the lane of sub-flow steps, which the daemon starts
// (docs/workflows.md, "Sub-flows"); no worker claims from it, and no
// other execution may be created in it.
const SubflowLane = "ffd.subflow"

// EventSubflow is the ChannelEvent item that says sub-flow steps may
// start; an event publication's notification is empty.
const EventSubflow = "subflow"

// DuePrefix starts a ChannelLease item that names a due time rather than
// a partition.
const DuePrefix = "due:"

// Channels lists every channel.
var Channels = []string{ChannelCompletion, ChannelLease, ChannelReady, ChannelRevoke, ChannelEvent}
