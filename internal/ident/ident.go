package ident

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// Partitions is the number of logical partitions ids are spread over.
const Partitions = 256

// ErrInvalid is matched (errors.Is) by every parse failure of this package.
var ErrInvalid = errors.New("invalid identifier")

// ParseError reports an identifier that is not of the accepted form; it
// quotes the input so a caller can show it to the user.
type ParseError struct {
	Kind   string // "execution id", "flow id", "uuid"
	Input  string
	Reason string
}

func (e *ParseError) Error() string {
	in := e.Input
	if len(in) > maxQuoted {
		// A message, and so a log line, stays short whatever came in.
		in = strings.ToValidUTF8(in[:maxQuoted], "") + "…"
	}
	return fmt.Sprintf("invalid %s %q: %s", e.Kind, in, e.Reason)
}

// maxQuoted is the longest input a ParseError's message quotes whole.
const maxQuoted = 100

// Is makes errors.Is(err, ErrInvalid) true for every ParseError.
func (e *ParseError) Is(target error) bool { return target == ErrInvalid }

// CRC16 is CRC-16/XMODEM: polynomial 0x1021, init 0, no reflection, xorout 0.
func CRC16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Partition is the partition a uuid hashes to: CRC-16/XMODEM of its 16 raw
// bytes, mod 256.
func Partition(u uuid.UUID) int16 {
	return int16(CRC16(u[:]) % Partitions)
}

// NewUUID mints a version 7 uuid: time-ordered, so ids inserted together sit
// together in every btree that indexes them.
func NewUUID() uuid.UUID {
	return uuid.Must(uuid.NewV7())
}

// NewUUIDIn mints a version 7 uuid whose own partition is partition: a
// fresh one with its last two random bytes chosen, so that a solo
// execution or a flow can be placed beside the row it must share a
// partition with (the holder of a key, the flow it reruns) and still
// satisfy "a solo id's partition is its uuid's". About 256 CRCs of 16
// bytes on average; partition must be in 0..Partitions-1.
func NewUUIDIn(partition int16) uuid.UUID {
	u := NewUUID()
	for i := range 1 << 16 {
		u[14], u[15] = byte(i>>8), byte(i)
		if Partition(u) == partition {
			return u
		}
	}
	// Unreachable for 0 <= partition < Partitions: the last two bytes
	// reach every CRC value.
	panic(fmt.Sprintf("ident: no uuid on partition %d", partition))
}

// KeyPartition is the partition a key hashes to within a namespace: an
// execution created with an idempotency or unique key is placed there, so
// that the key's unique index, which leads with partition_key, sees every
// row that could hold the key.
func KeyPartition(namespace, key string) int16 {
	b := make([]byte, 0, len(namespace)+1+len(key))
	b = append(append(append(b, namespace...), 0), key...)
	return int16(CRC16(b) % Partitions)
}

// NewExecutionIDForKey mints a solo execution id on its key's partition.
func NewExecutionIDForKey(namespace, key string) ExecutionID {
	return NewSoloExecutionIDIn(KeyPartition(namespace, key))
}

// NewSoloExecutionIDIn mints a solo execution id on partition, its uuid's
// own (a rerun beside its original).
func NewSoloExecutionIDIn(partition int16) ExecutionID {
	return ExecutionID{Partition: partition, UUID: NewUUIDIn(partition)}
}

// ExecutionID is an execution's wire id `{fp:N}:<uuid>`. Partition N is the
// flow's partition for a flow member and the uuid's own partition for a solo
// execution, so a flow and all its members share one partition key.
type ExecutionID struct {
	Partition int16
	UUID      uuid.UUID
}

// NewExecutionID mints a solo execution id: a fresh v7 uuid on its own
// partition.
func NewExecutionID() ExecutionID {
	u := NewUUID()
	return ExecutionID{Partition: Partition(u), UUID: u}
}

// NewExecutionIDIn mints an execution id on the given partition, as a flow
// member is minted on its flow's partition.
func NewExecutionIDIn(partition int16) ExecutionID {
	return ExecutionID{Partition: partition, UUID: NewUUID()}
}

// String renders the canonical wire form.
func (id ExecutionID) String() string {
	return "{fp:" + strconv.Itoa(int(id.Partition)) + "}:" + id.UUID.String()
}

// IsZero reports whether id is the zero value.
func (id ExecutionID) IsZero() bool { return id == ExecutionID{} }

// MarshalText renders the wire form, so ids read well in JSON.
func (id ExecutionID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }

// UnmarshalText parses the wire form.
func (id *ExecutionID) UnmarshalText(b []byte) error {
	parsed, err := ParseExecutionID(string(b))
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}

// ParseExecutionID accepts exactly `{fp:N}:<uuid>` with N a decimal in
// 0..255 without sign or leading zeros, and a hyphenated uuid in either
// case (printed back lower-case).
func ParseExecutionID(s string) (ExecutionID, error) {
	fail := func(reason string) (ExecutionID, error) {
		return ExecutionID{}, &ParseError{Kind: "execution id", Input: s, Reason: reason}
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
	parsed, err := parseCanonicalUUID(u)
	if err != nil {
		return fail(err.Error())
	}
	return ExecutionID{Partition: int16(n), UUID: parsed}, nil
}

// ParseUUID accepts the hyphenated form ffd prints, in either case (tools
// that print uuids upper-case are common); ffd prints it lower-case, so
// an id has one printed spelling. Braces, URNs and unhyphenated forms are
// refused.
func ParseUUID(kind, s string) (uuid.UUID, error) {
	u, err := parseCanonicalUUID(s)
	if err != nil {
		return uuid.Nil, &ParseError{Kind: kind, Input: s, Reason: err.Error()}
	}
	return u, nil
}

func parseCanonicalUUID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, errors.New("uuid must be 36 characters, hexadecimal and hyphenated")
	}
	u, err := uuid.Parse(s)
	if err != nil || u.String() != strings.ToLower(s) {
		return uuid.Nil, errors.New("uuid must be hexadecimal and hyphenated")
	}
	return u, nil
}
