package ffd

import (
	"errors"

	"github.com/flowfabric/ffd/internal/fault"
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

// Error details; match with errors.As.
type (
	// ValidationError is bad input; nothing was written.
	ValidationError = fault.ValidationError
	// ValidationKind classifies a ValidationError.
	ValidationKind = fault.ValidationKind
	// NotFoundError names the missing object.
	NotFoundError = fault.NotFoundError
	// ConflictError carries the existing object.
	ConflictError = fault.ConflictError
	// StaleRevisionError is a lost compare-and-set on a flow's revision.
	StaleRevisionError = fault.StaleRevisionError
	// LeaseLostError is a fenced call by a holder whose lease is gone.
	LeaseLostError = fault.LeaseLostError
	// AlreadyTerminalError is an operation on a finished object.
	AlreadyTerminalError = fault.AlreadyTerminalError
)

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
