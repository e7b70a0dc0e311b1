package leases

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
	"github.com/flowfabric/ffd/internal/ident"
)

// Bounds on the text a caller hands to a transition. Postgres refuses NUL
// bytes and invalid UTF-8 in text columns with a raw SQLSTATE; checking
// here turns them into a ValidationError before anything is written.
const (
	// MaxErrorBytes bounds a failure message (FailParams.Error).
	MaxErrorBytes = 16 << 10
	// MaxReasonBytes bounds a cancellation or revocation reason.
	MaxReasonBytes = 4 << 10
	// MaxByBytes bounds who cancelled (Cancel's by).
	MaxByBytes = 256
	// MaxTagsBytes bounds an execution's tags, as JSON.
	MaxTagsBytes = 64 << 10
	// MaxCreateMany bounds one batch create.
	MaxCreateMany = 10000
	// MaxMaxPayloadBytes is the largest payload (and result) limit a
	// client may configure.
	MaxMaxPayloadBytes = 64 << 20
)

// CleanText makes s storable as a failure message: invalid UTF-8 and NUL
// bytes are replaced and it is cut to at most max bytes on a rune
// boundary. The worker records handler errors through it, since a
// handler's error text is not the caller's input to refuse.
func CleanText(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// ValidateText refuses NUL bytes, invalid UTF-8 and text longer than max
// bytes (max 0: no bound).
func ValidateText(field, v string, max int) error {
	if max > 0 && len(v) > max {
		return fault.Invalid(ffdtype.KindTooLarge, field, strconv.Itoa(len(v))+" bytes", fmt.Sprintf("at most %d bytes", max))
	}
	if !utf8.ValidString(v) {
		return fault.Invalid(ffdtype.KindInvalidValue, field, strings.ToValidUTF8(v, "\uFFFD"), "must be valid UTF-8")
	}
	if strings.IndexByte(v, 0) >= 0 {
		return fault.Invalid(ffdtype.KindInvalidValue, field, strings.ReplaceAll(v, "\x00", `\0`), "must not contain NUL bytes")
	}
	return nil
}

// validateJSONText refuses JSON that Postgres's jsonb cannot store: the
// escaped NUL character.
func validateJSONText(field string, b []byte) error {
	if bytes.Contains(b, []byte(`\u0000`)) {
		return fault.Invalid(ffdtype.KindInvalidValue, field, string(b), `must not contain NUL characters (\u0000)`)
	}
	return nil
}

// ValidateID refuses an execution id that no parse would produce: a
// partition outside 0..255 or the nil uuid.
func ValidateID(field string, id ffdtype.ExecutionID) error {
	if id.Partition < 0 || id.Partition >= ident.Partitions {
		return fault.Invalid(ffdtype.KindMalformedID, field, id.String(), fmt.Sprintf("partition %d is outside 0..%d", id.Partition, ident.Partitions-1))
	}
	if id.UUID == [16]byte{} {
		return fault.Invalid(ffdtype.KindMalformedID, field, id.String(), "the nil uuid is not an execution id")
	}
	return nil
}

// validateFence checks the arguments of a fenced call. Epochs start at 1
// with the first claim; 0 is what an unclaimed execution reports, so a
// caller passing it is not holding a lease and must not be let through.
func validateFence(id ffdtype.ExecutionID, epoch int64) error {
	if err := ValidateID("execution_id", id); err != nil {
		return err
	}
	if epoch < 1 {
		return fault.Invalid(ffdtype.KindOutOfRange, "lease_epoch", strconv.FormatInt(epoch, 10),
			"want the epoch of a held lease (1 or more; an execution that was never claimed has no lease to fence on)")
	}
	return nil
}
