// Package fault builds ffd's typed errors (package ffdtype defines them)
// the one way every operation must: a ValidationError's value shortened so
// that no error, and so no log line, carries a caller's megabytes.
package fault

import "github.com/flowfabric/ffd/ffdtype"

// MaxValue is the longest value a ValidationError quotes whole.
const MaxValue = 200

// Invalid builds a ValidationError, shortening very long values.
func Invalid(kind ffdtype.ValidationKind, field, value, detail string) *ffdtype.ValidationError {
	if len(value) > MaxValue {
		value = value[:MaxValue] + "…"
	}
	return &ffdtype.ValidationError{Kind: kind, Field: field, Value: value, Detail: detail}
}

// Range is an integer field's accepted values and the refusal of any
// other: one statement of a check that the Go API makes (Holds) and the
// SQL API renders (internal/store, sqlapi.sql), so the two cannot drift.
type Range struct {
	// Field names the field in the error.
	Field string
	// Min and Max bound the value, in the Go API's unit (nanoseconds for a
	// duration).
	Min, Max int64
	// None accepts 0 too: the field's "none".
	None bool
	// Scale divides the bounds for the SQL API, which reads durations in
	// microseconds (1000 for a duration; 0 or 1 for a plain integer).
	Scale int64
	// Detail is the error's detail.
	Detail string
}

// Holds reports whether v is in the range.
func (r *Range) Holds(v int64) bool { return (r.None && v == 0) || (v >= r.Min && v <= r.Max) }

// Refusal is the out_of_range ValidationError of a value outside the
// range, quoted as value (formatted only once it is refused: creates
// check every field on the hot path).
func (r *Range) Refusal(value string) error {
	return Invalid(ffdtype.KindOutOfRange, r.Field, value, r.Detail)
}
