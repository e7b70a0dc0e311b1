package ffdtype

import (
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Partitions is the number of partitions ids are spread over: a
// partition is 0..Partitions-1.
const Partitions = 256

// ExecutionID is an execution's id: the partition it lives on and its
// uuid. On the wire (String, JSON, the CLI) it reads `{fp:N}:<uuid>`. N is
// the flow's partition for a flow member and the uuid's own for a solo
// execution, so that a flow and all its members share one partition.
type ExecutionID struct {
	// Partition is 0..255, the partition the execution's rows live on.
	Partition int16
	// UUID is the execution's uuid (version 7: ids sort by creation time).
	UUID uuid.UUID
}

// String is the wire form, `{fp:N}:<uuid>`.
func (id ExecutionID) String() string {
	return "{fp:" + strconv.Itoa(int(id.Partition)) + "}:" + id.UUID.String()
}

// IsZero reports the zero id.
func (id ExecutionID) IsZero() bool { return id == ExecutionID{} }

// MarshalText encodes the wire form, so that ids read well in JSON.
func (id ExecutionID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText decodes the wire form; anything else is a
// *ValidationError quoting the input.
func (id *ExecutionID) UnmarshalText(b []byte) error {
	parsed, err := ParseExecutionID(string(b))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// ParseExecutionID accepts exactly `{fp:N}:<uuid>`, N a decimal in 0..255
// without sign or leading zeros and the uuid hyphenated, in either case
// (printed back lower-case). Anything else is a *ValidationError of kind
// KindMalformedID quoting the input.
func ParseExecutionID(s string) (ExecutionID, error) {
	fail := func(detail string) (ExecutionID, error) {
		return ExecutionID{}, malformed("execution_id", s, detail)
	}
	rest, ok := strings.CutPrefix(s, "{fp:")
	if !ok {
		return fail("want {fp:N}:<uuid>")
	}
	num, u, ok := strings.Cut(rest, "}:")
	if !ok {
		return fail("want {fp:N}:<uuid>")
	}
	if num == "" || len(num) > 3 || (len(num) > 1 && num[0] == '0') {
		return fail("partition must be a decimal in 0..255")
	}
	for _, c := range num {
		if c < '0' || c > '9' {
			return fail("partition must be a decimal in 0..255")
		}
	}
	n, _ := strconv.Atoi(num)
	if n >= Partitions {
		return fail("partition must be a decimal in 0..255")
	}
	parsed, detail := canonicalUUID(u)
	if detail != "" {
		return fail(detail)
	}
	return ExecutionID{Partition: int16(n), UUID: parsed}, nil
}

// ParseUUID parses a uuid as ffd prints it (a flow's id, an edge's):
// hyphenated, in either case (tools that print uuids upper-case are
// common; ffd prints them lower-case, so an id has one spelling). Braces,
// URNs and unhyphenated forms are a *ValidationError of kind
// KindMalformedID naming field.
func ParseUUID(field, s string) (uuid.UUID, error) {
	u, detail := canonicalUUID(s)
	if detail != "" {
		return uuid.Nil, malformed(field, s, detail)
	}
	return u, nil
}

func canonicalUUID(s string) (uuid.UUID, string) {
	if len(s) != 36 {
		return uuid.Nil, "uuid must be 36 characters, hexadecimal and hyphenated"
	}
	u, err := uuid.Parse(s)
	if err != nil || u.String() != strings.ToLower(s) {
		return uuid.Nil, "uuid must be hexadecimal and hyphenated"
	}
	return u, ""
}

// maxQuoted is the longest input a malformed-id error quotes whole, so a
// message, and so a log line, stays short whatever came in.
const maxQuoted = 100

func malformed(field, s, detail string) *ValidationError {
	if len(s) > maxQuoted {
		s = strings.ToValidUTF8(s[:maxQuoted], "") + "…"
	}
	return &ValidationError{Kind: KindMalformedID, Field: field, Value: s, Detail: detail}
}
