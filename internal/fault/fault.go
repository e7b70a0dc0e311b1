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
