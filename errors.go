package ffd

import (
	"errors"

	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/store"
)

// Sentinel errors; match with errors.Is.
var (
	ErrNotFound        = fault.ErrNotFound
	ErrValidation      = fault.ErrValidation
	ErrConflict        = fault.ErrConflict
	ErrStaleRevision   = fault.ErrStaleRevision
	ErrLeaseLost       = fault.ErrLeaseLost
	ErrAlreadyTerminal = fault.ErrAlreadyTerminal
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
	return (&fault.ValidationError{Kind: fault.ValidationKind(e.Kind), Field: e.Field, Value: e.Value, Detail: e.Detail}).Error()
}

// Is matches ErrValidation.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

// NotFoundError names the missing object. It matches ErrNotFound.
type NotFoundError struct {
	// Object is "execution", "flow", "edge" or "consumer".
	Object string
	// ID is the id that was looked for.
	ID string
}

func (e *NotFoundError) Error() string { return (*fault.NotFoundError)(e).Error() }

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
	// *Flow, *Edge, EdgeGroup or a flow id (uuid.UUID).
	Existing any
}

func (e *ConflictError) Error() string {
	return (&fault.ConflictError{Object: e.Object, ID: e.ID, Reason: e.Reason}).Error()
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

func (e *StaleRevisionError) Error() string { return (*fault.StaleRevisionError)(e).Error() }

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
}

func (e *LeaseLostError) Error() string { return (*fault.LeaseLostError)(e).Error() }

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

func (e *AlreadyTerminalError) Error() string { return (*fault.AlreadyTerminalError)(e).Error() }

// Is matches ErrAlreadyTerminal.
func (e *AlreadyTerminalError) Is(target error) bool { return target == ErrAlreadyTerminal }

func init() { fault.Public = publicError }

// publicError converts the errors of the packages below the API into the
// public types above, for errors.As (fault.Public).
func publicError(err error, target any) bool {
	return convert(err, target, func(e *fault.ValidationError) *ValidationError {
		return &ValidationError{Kind: ValidationKind(e.Kind), Field: e.Field, Value: e.Value, Detail: e.Detail}
	}) ||
		convert(err, target, func(e *fault.NotFoundError) *NotFoundError { return (*NotFoundError)(e) }) ||
		convert(err, target, func(e *fault.ConflictError) *ConflictError {
			return &ConflictError{Object: e.Object, ID: e.ID, Reason: e.Reason, Existing: publicObject(e.Existing)}
		}) ||
		convert(err, target, func(e *fault.StaleRevisionError) *StaleRevisionError { return (*StaleRevisionError)(e) }) ||
		convert(err, target, func(e *fault.LeaseLostError) *LeaseLostError { return (*LeaseLostError)(e) }) ||
		convert(err, target, func(e *fault.AlreadyTerminalError) *AlreadyTerminalError { return (*AlreadyTerminalError)(e) })
}

// convert sets *target to to(err) when err is an I and target a **P.
func convert[I error, P any](err error, target any, to func(I) *P) bool {
	t, ok := target.(**P)
	if !ok {
		return false
	}
	e, ok := err.(I)
	if !ok {
		return false
	}
	*t = to(e)
	return true
}

// publicObject converts a ConflictError's existing object.
func publicObject(v any) any {
	switch o := v.(type) {
	case *store.Execution:
		return executionOf(o)
	case *store.Flow:
		return flowOf(o)
	case *store.Edge:
		return edgeOf(o)
	case store.EdgeGroup:
		return groupOf(o)
	case *store.Consumer:
		return consumerOf(o)
	case *store.Schedule:
		out, _ := scheduleOf(o, nil)
		return out
	case *store.EdgeGroup:
		if o == nil {
			return nil
		}
		return groupOf(*o)
	}
	return v
}

// ErrWorkerStopped is the cause of a handler context cancelled because its
// worker was stopped before the handler finished.
var ErrWorkerStopped = errors.New("worker stopped")

// PermanentError marks a handler error that must not be retried.
type PermanentError struct{ Err error }

func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the worker fails the execution at once
// instead of retrying it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}
