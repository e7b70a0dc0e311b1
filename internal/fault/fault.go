// Package fault defines the typed errors every ffd operation returns. The
// public package re-exports them; callers match them with errors.Is (the
// sentinels) and errors.As (the structs, for details).
package fault

import (
	"errors"
	"fmt"
)

// Sentinels; every error type below matches exactly one of them.
var (
	ErrNotFound        = errors.New("not found")
	ErrValidation      = errors.New("invalid input")
	ErrConflict        = errors.New("conflict")
	ErrStaleRevision   = errors.New("stale graph revision")
	ErrLeaseLost       = errors.New("lease lost")
	ErrAlreadyTerminal = errors.New("already terminal")
)

// Public converts an error of this package into the public type target
// points to (a **ffd.ValidationError, say), for errors.As. The root
// package sets it once, at init: the public API defines its own error
// types with documented fields, and callers match those, while the
// packages below it, which cannot import the root, return these.
var Public func(err error, target any) bool

func public(err error, target any) bool { return Public != nil && Public(err, target) }

// ValidationKind classifies bad input.
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
type ValidationError struct {
	Kind   ValidationKind
	Field  string // the parameter, e.g. "lane"
	Value  string // the offending value as given (possibly shortened)
	Detail string // what was expected
}

// As converts e into the public error type (see Public).
func (e *ValidationError) As(target any) bool { return public(e, target) }

func (e *ValidationError) Error() string {
	return fmt.Sprintf("invalid %s %q: %s", e.Field, e.Value, e.Detail)
}

// Is matches ErrValidation.
func (e *ValidationError) Is(target error) bool { return target == ErrValidation }

// Invalid builds a ValidationError, shortening very long values.
func Invalid(kind ValidationKind, field, value, detail string) *ValidationError {
	if len(value) > 200 {
		value = value[:200] + "…"
	}
	return &ValidationError{Kind: kind, Field: field, Value: value, Detail: detail}
}

// NotFoundError names what was looked for.
type NotFoundError struct {
	Object string // "execution", "flow", "edge"
	ID     string
}

// As converts e into the public error type (see Public).
func (e *NotFoundError) As(target any) bool { return public(e, target) }

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %s not found", e.Object, e.ID) }

// Is matches ErrNotFound.
func (e *NotFoundError) Is(target error) bool { return target == ErrNotFound }

// ConflictError carries the existing object the request collided with.
type ConflictError struct {
	Object   string
	ID       string
	Reason   string
	Existing any
}

// As converts e into the public error type (see Public).
func (e *ConflictError) As(target any) bool { return public(e, target) }

func (e *ConflictError) Error() string {
	return fmt.Sprintf("%s %s: %s", e.Object, e.ID, e.Reason)
}

// Is matches ErrConflict.
func (e *ConflictError) Is(target error) bool { return target == ErrConflict }

// StaleRevisionError is a compare-and-set on a flow's graph revision that
// lost.
type StaleRevisionError struct {
	FlowID            string
	Expected, Current int64
}

// As converts e into the public error type (see Public).
func (e *StaleRevisionError) As(target any) bool { return public(e, target) }

func (e *StaleRevisionError) Error() string {
	return fmt.Sprintf("flow %s: graph revision is %d, not %d", e.FlowID, e.Current, e.Expected)
}

// Is matches ErrStaleRevision.
func (e *StaleRevisionError) Is(target error) bool { return target == ErrStaleRevision }

// LeaseLostError is a fenced operation by a holder whose lease is gone:
// the epoch moved on, or the execution is no longer running.
type LeaseLostError struct {
	ExecutionID  string
	Epoch        int64 // the epoch the caller named
	CurrentEpoch int64
	State        string
}

// As converts e into the public error type (see Public).
func (e *LeaseLostError) As(target any) bool { return public(e, target) }

func (e *LeaseLostError) Error() string {
	return fmt.Sprintf("lease lost on execution %s: held epoch %d, execution is %s at epoch %d", e.ExecutionID, e.Epoch, e.State, e.CurrentEpoch)
}

// Is matches ErrLeaseLost.
func (e *LeaseLostError) Is(target error) bool { return target == ErrLeaseLost }

// AlreadyTerminalError is an operation on an object that has finished.
type AlreadyTerminalError struct {
	Object string
	ID     string
	State  string
}

// As converts e into the public error type (see Public).
func (e *AlreadyTerminalError) As(target any) bool { return public(e, target) }

func (e *AlreadyTerminalError) Error() string {
	return fmt.Sprintf("%s %s is already %s", e.Object, e.ID, e.State)
}

// Is matches ErrAlreadyTerminal.
func (e *AlreadyTerminalError) Is(target error) bool { return target == ErrAlreadyTerminal }
