package ffdtype

import (
	"time"

	"github.com/google/uuid"
)

// Trigger is a stored trigger: each event of its name (in its namespace)
// whose payload contains its filter starts its target once.
type Trigger struct {
	// Name, Namespace and Event are as created.
	Name      string
	Namespace string
	Event     string
	// Filter is a JSON object the event's payload must contain (as
	// Postgres's jsonb @> says); nil: every event of the name.
	Filter map[string]any
	// Target is "execution" or "flow".
	Target string
	// Paused triggers start nothing; their events are fired without them.
	Paused bool
	// Fired counts the executions and flows it started.
	Fired int64
	// CreatedAt is its creation time.
	CreatedAt time.Time
}

// Event is a published event.
type Event struct {
	ID        uuid.UUID
	Namespace string
	Name      string
	// Key makes the event once: a second publication of the key in the
	// namespace, under the name, is this event.
	Key         string
	Payload     []byte // JSON, or empty
	PublishedAt time.Time
	// FiredAt is when the daemon fired its triggers; nil before.
	FiredAt *time.Time
	// Started counts what its triggers started.
	Started int
	// Error says why a trigger failed to fire it, when one did.
	Error string
}
