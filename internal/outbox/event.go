package outbox

import (
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/fault"
)

// ParseStream validates a stream name.
func ParseStream(s string) (ffdtype.OutboxStream, error) {
	switch ffdtype.OutboxStream(s) {
	case ffdtype.StreamCompletion, ffdtype.StreamLease, ffdtype.StreamAll:
		return ffdtype.OutboxStream(s), nil
	}
	return "", fault.Invalid(ffdtype.KindInvalidValue, "stream", s, "want completion, lease or all")
}
