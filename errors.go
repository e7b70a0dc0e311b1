package ffd

import (
	"errors"

	"github.com/flowfabric/ffd/ffdtype"
)

// Sentinel errors; match with errors.Is.
var (
	ErrNotFound        = ffdtype.ErrNotFound
	ErrValidation      = ffdtype.ErrValidation
	ErrConflict        = ffdtype.ErrConflict
	ErrStaleRevision   = ffdtype.ErrStaleRevision
	ErrLeaseLost       = ffdtype.ErrLeaseLost
	ErrAlreadyTerminal = ffdtype.ErrAlreadyTerminal
)

// The typed errors every operation returns, defined once in ffdtype (see
// there for their fields); match them with errors.As.
type (
	ValidationKind       = ffdtype.ValidationKind
	ValidationError      = ffdtype.ValidationError
	NotFoundError        = ffdtype.NotFoundError
	ConflictError        = ffdtype.ConflictError
	StaleRevisionError   = ffdtype.StaleRevisionError
	LeaseLostError       = ffdtype.LeaseLostError
	AlreadyTerminalError = ffdtype.AlreadyTerminalError
)

// Validation kinds.
const (
	KindMalformedID  = ffdtype.KindMalformedID
	KindRequired     = ffdtype.KindRequired
	KindOutOfRange   = ffdtype.KindOutOfRange
	KindInvalidValue = ffdtype.KindInvalidValue
	KindTooLarge     = ffdtype.KindTooLarge
	KindCycle        = ffdtype.KindCycle
	KindNotMember    = ffdtype.KindNotMember
	// KindUnknownVersion: a version no worker announced.
	KindUnknownVersion = ffdtype.KindUnknownVersion
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
