package ffdtype

import (
	"errors"
	"fmt"
)

// Sentinel errors; every error type below matches exactly one of them
// with errors.Is.
var (
	ErrNotFound        = errors.New("not found")
	ErrValidation      = errors.New("invalid input")
	ErrConflict        = errors.New("conflict")
	ErrStaleRevision   = errors.New("stale graph revision")
	ErrLeaseLost       = errors.New("lease lost")
	ErrAlreadyTerminal = errors.New("already terminal")
)

// ValidationKind classifies a ValidationError.
type ValidationKind string

// Validation kinds.
const (
	KindMalformedID  ValidationKind = "malformed_id"
	KindRequired     ValidationKind = "required"
	KindOutOfRange   ValidationKind = "out_of_range"
	KindInvalidValue ValidationKind = "invalid_value"
	KindTooLarge     ValidationKind = "too_large"
	KindCycle        ValidationKind = "cycle"
	KindNotMember    ValidationKind = "not_member"
	// KindUnknownVersion: a version no worker announced
	// (docs/workflows.md, "Versions").
	KindUnknownVersion ValidationKind = "unknown_version"
)

// ValidationError is bad input, caught before anything was written.
// Match it with errors.As; it also matches ErrValidation.
type ValidationError struct {
	// Kind classifies the problem.
	Kind ValidationKind
	// Field is the parameter, e.g. "lane" or "nodes[fetch].max_attempts".
	Field string
	// Value is the offending value as given (long values shortened).
	Value string
	// Detail says what was expected.
	Detail string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Detail)
}

// Is matches ErrValidation.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

// NotFoundError names the missing object. It matches ErrNotFound.
type NotFoundError struct {
	// Object is "execution", "flow", "edge", "consumer", "lane" or
	// "schedule" or "key".
	Object string
	// ID is the id that was looked for.
	ID string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s not found", e.Object, e.ID) }

// Is matches ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ConflictError is a request that collided with an existing object. It
// matches ErrConflict.
type ConflictError struct {
	// Object and ID name what was collided with.
	Object string
	ID     string
	// Reason says why the request was refused.
	Reason string
	// Existing is the existing object when the call has it: an *Execution,
	// *Flow, *Edge, EdgeGroup, *Schedule or a flow id (uuid.UUID).
	Existing any
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Object, e.ID, e.Reason)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// StaleRevisionError is a compare-and-set on a flow's graph revision that
// lost: re-read the flow and retry. It matches ErrStaleRevision.
type StaleRevisionError struct {
	// FlowID is the flow's id.
	FlowID string
	// Expected is the revision the caller named; Current is the flow's.
	Expected, Current int64
}

func (e *StaleRevisionError) Error() string {
	return fmt.Sprintf("flow %s: graph revision is %d, not %d", e.FlowID, e.Current, e.Expected)
}

// Is matches ErrStaleRevision.
func (e *StaleRevisionError) Is(target error) bool { return target == ErrStaleRevision }

// LeaseLostError is a fenced call by a holder whose lease is gone: the
// epoch moved on, or the execution is no longer running. It matches
// ErrLeaseLost.
type LeaseLostError struct {
	// ExecutionID is the execution's id.
	ExecutionID string
	// Epoch is the epoch the caller named.
	Epoch int64
	// CurrentEpoch and State are the execution's now.
	CurrentEpoch int64
	State        string
	// Unread, when not nil, is why CurrentEpoch and State could not be
	// read. The fenced operation matched nothing, so the lease is lost
	// all the same: a caller that retried on the read's error would renew
	// a lease it no longer holds again and again.
	Unread error
}

func (e *LeaseLostError) Error() string {
	if e.Unread != nil {
		return fmt.Sprintf("lease lost on execution %s: held epoch %d (its state could not be read: %v)", e.ExecutionID, e.Epoch, e.Unread)
	}
	return fmt.Sprintf("lease lost on execution %s: held epoch %d, execution is %s at epoch %d", e.ExecutionID, e.Epoch, e.State, e.CurrentEpoch)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// AlreadyTerminalError is an operation on an object that has finished. It
// matches ErrAlreadyTerminal.
type AlreadyTerminalError struct {
	// Object and ID name the finished object.
	Object string
	ID     string
	// State is its terminal state.
	State string
}

func (e *AlreadyTerminalError) Error() string {
	return fmt.Sprintf("%s %s is already %s", e.Object, e.ID, e.State)
}

// Is matches ErrAlreadyTerminal.
func (e *AlreadyTerminalError) Is(target error) bool { return target == ErrAlreadyTerminal }
