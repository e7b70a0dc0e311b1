package ffdtype

import "time"

// Lane is a lane under control: paused, limited, rate-limited or keyed.
type Lane struct {
	// Name is the lane.
	Name string
	// Paused lanes are not claimed from; executions already running
	// finish.
	Paused bool
	// MaxRunning caps the lane's running executions across every worker;
	// 0: no cap.
	MaxRunning int
	// Rate limits how often the lane's executions start; nil: no limit.
	Rate *Rate
	// Keyed: the lane has held executions with a ConcurrencyKey, so its
	// claims take turns across its keys.
	Keyed bool
	// UpdatedAt is the last change.
	UpdatedAt time.Time

	// What ListLanes saw when it read the lane: executions running and
	// due (pending, run_at reached), the rate tokens left (with Rate),
	// the keys the lane knows and how many of them are at their running
	// limit or out of rate tokens while they have due executions, and
	// how many due executions wait behind those keys.
	Running     int
	Due         int
	Tokens      float64
	Keys        int
	KeysHeld    int
	WaitingHeld int
}

// Rate is a rate limit, a token bucket: Count starts per Per on average,
// at most Burst at once after a quiet spell.
type Rate struct {
	// Count starts per Per: 1..1,000,000.
	Count int
	// Per is the interval: 1 ms..24 h.
	Per time.Duration
	// Burst is the most starts at once; default (0) one second's worth of
	// the rate, at least 1.
	Burst int
}

// Key is a concurrency key of a lane (docs/flow-control.md).
type Key struct {
	// Lane and Key name it; Key "" stands for the lane's executions
	// without a key, which take turns as one key.
	Lane, Key string
	// MaxRunning caps the key's running executions across every worker;
	// 0: no cap.
	MaxRunning int
	// Rate limits how often the key's executions start; nil: no limit.
	Rate *Rate
	// Weight is the key's share of each round of turns; default 1.
	Weight int
	// Order is OrderFair, or OrderStrict: the key runs its executions
	// one at a time in creation order.
	Order KeyOrder
	// Configured: set by SetKey, and kept while idle. A key only its
	// executions named is forgotten once it has no live execution.
	Configured bool
	// ServedAt is the last claim that took a turn with the key; nil:
	// never.
	ServedAt *time.Time

	// What ListKeys saw: executions running and due, and rate tokens
	// left (with Rate). Held: due executions wait because the key is at
	// its running limit or out of tokens.
	Running int
	Due     int
	Tokens  float64
	Held    bool
}

// KeyOrder is how a key orders its executions.
type KeyOrder string

// Key orders.
const (
	// OrderFair: the key's executions start by priority, then run_at,
	// up to its running limit, as its turns come (the default).
	OrderFair KeyOrder = "fair"
	// OrderStrict: the key runs its executions one at a time, in the
	// order they were created; a retrying execution holds its place.
	OrderStrict KeyOrder = "strict"
)
