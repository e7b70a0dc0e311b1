package ffdtype

import "time"

// Lane is a lane under control: paused, limited, or both.
type Lane struct {
	// Name is the lane.
	Name string
	// Paused lanes are not claimed from; executions already running
	// finish.
	Paused bool
	// MaxRunning caps the lane's running executions across every worker;
	// 0: no cap.
	MaxRunning int
	// UpdatedAt is the last change.
	UpdatedAt time.Time
}
