package ident

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
)

func TestCRC16Vectors(t *testing.T) {
	t.Parallel()
	if got := CRC16([]byte("123456789")); got != 0x31C3 {
		t.Fatalf("CRC16(\"123456789\") = %#04x, want 0x31c3", got)
	}
	tests := []struct {
		uuid      string
		crc       uint16
		partition int16
	}{
		{"00000000-0000-0000-0000-000000000000", 0x0000, 0},
		{"550e8400-e29b-41d4-a716-446655440000", 0x9018, 24},
		{"ffffffff-ffff-ffff-ffff-ffffffffffff", 0x0041, 65},
	}
	for _, tt := range tests {
		u := uuid.MustParse(tt.uuid)
		if got := CRC16(u[:]); got != tt.crc {
			t.Errorf("CRC16(%s) = %#04x, want %#04x", tt.uuid, got, tt.crc)
		}
		if got := Partition(u); got != tt.partition {
			t.Errorf("Partition(%s) = %d, want %d", tt.uuid, got, tt.partition)
		}
	}
}

func TestExecutionIDRoundTrip(t *testing.T) {
	t.Parallel()
	for range 100 {
		id := NewExecutionID()
		if id.Partition != Partition(id.UUID) {
			t.Fatalf("solo id %s minted on partition %d, want %d", id, id.Partition, Partition(id.UUID))
		}
		if id.UUID.Version() != 7 {
			t.Fatalf("id %s: uuid version %d, want 7", id, id.UUID.Version())
		}
		back, err := ParseExecutionID(id.String())
		if err != nil || back != id {
			t.Fatalf("ParseExecutionID(%s) = %v, %v; want the same id", id, back, err)
		}
	}
	member := NewExecutionIDIn(200)
	if member.Partition != 200 || !strings.HasPrefix(member.String(), "{fp:200}:") {
		t.Fatalf("NewExecutionIDIn(200) = %s, want partition 200", member)
	}
}

// A uuid printed upper-case (some tools do) is read, and printed back
// lower-case: the same id.
func TestParseReadsUpperCase(t *testing.T) {
	t.Parallel()
	const u = "550e8400-e29b-41d4-a716-446655440000"
	id, err := ParseExecutionID("{fp:24}:" + strings.ToUpper(u))
	if err != nil || id.String() != "{fp:24}:"+u {
		t.Fatalf("upper-case id: %v, %v; want {fp:24}:%s", id, err, u)
	}
	if got, err := ParseUUID("flow id", strings.ToUpper(u)); err != nil || got.String() != u {
		t.Fatalf("upper-case uuid: %v, %v; want %s", got, err, u)
	}
}

func TestParseExecutionIDRejects(t *testing.T) {
	t.Parallel()
	const u = "550e8400-e29b-41d4-a716-446655440000"
	bad := []string{
		"",
		u,
		"{fp:24}" + u,
		"{fp:24}:",
		"{fp:}:" + u,
		"{fp:256}:" + u,
		"{fp:-1}:" + u,
		"{fp:024}:" + u,
		"{fp:+4}:" + u,
		"{fp:1000}:" + u,
		"{fp:24}:" + strings.ReplaceAll(u, "-", ""),
		"{fp:24}:{" + u + "}",
		"{FP:24}:" + u,
		" {fp:24}:" + u,
		"{fp:24}:" + u + " ",
		"{fp:24}:550e8400-e29b-41d4-a716-44665544000g",
	}
	for _, s := range bad {
		_, err := ParseExecutionID(s)
		if err == nil {
			t.Errorf("ParseExecutionID(%q) succeeded, want an error", s)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseExecutionID(%q) error %v does not match ErrInvalid", s, err)
		}
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Input != s || !strings.Contains(err.Error(), "\""+s+"\"") && s != "" {
			t.Errorf("ParseExecutionID(%q) error %v does not quote its input", s, err)
		}
	}
	id, err := ParseExecutionID("{fp:0}:" + u)
	if err != nil || id.Partition != 0 {
		t.Fatalf("ParseExecutionID({fp:0}) = %v, %v; want partition 0", id, err)
	}
}

func TestParseUUID(t *testing.T) {
	t.Parallel()
	if _, err := ParseUUID("flow id", "550e8400-e29b-41d4-a716-446655440000"); err != nil {
		t.Fatalf("canonical uuid refused: %v", err)
	}
	for _, s := range []string{"", "nope", "{550e8400-e29b-41d4-a716-446655440000}", "550e8400e29b41d4a716446655440000", "urn:uuid:550e8400-e29b-41d4-a716-446655440000"} {
		_, err := ParseUUID("flow id", s)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "flow id") {
			t.Errorf("ParseUUID(%q) = %v, want an invalid flow id error", s, err)
		}
	}
}

// FuzzParseExecutionID checks that whatever parses prints back to the
// input with its uuid lower-cased (one printed spelling per id) and that
// failures are typed.
func FuzzParseExecutionID(f *testing.F) {
	f.Add("{fp:24}:550e8400-e29b-41d4-a716-446655440000")
	f.Add("{fp:0}:00000000-0000-0000-0000-000000000000")
	f.Add("{fp:255}:ffffffff-ffff-ffff-ffff-ffffffffffff")
	f.Add("{fp:256}:ffffffff-ffff-ffff-ffff-ffffffffffff")
	f.Fuzz(func(t *testing.T, s string) {
		id, err := ParseExecutionID(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("untyped error for %q: %v", s, err)
			}
			return
		}
		if id.String() != strings.ToLower(s) {
			t.Fatalf("parsed %q but prints %q", s, id.String())
		}
		if id.Partition < 0 || id.Partition >= Partitions {
			t.Fatalf("parsed %q to partition %d", s, id.Partition)
		}
	})
}

// KeyPartition places rows: a change to it would put new holders of a key
// on another partition than the old ones, so its values are pinned.
func TestKeyPartitionIsPinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		namespace, key string
		want           int16
	}{
		{"default", "order-1", 94},
		{"default", "order-2", 61},
		{"billing", "order-1", 170},
		{"", "x", 159},
	} {
		if got := KeyPartition(c.namespace, c.key); got != c.want {
			t.Errorf("KeyPartition(%q, %q) = %d, want %d", c.namespace, c.key, got, c.want)
		}
	}
	// The namespace and the key are separated: ("a", "bc") and ("ab", "c")
	// are different keys.
	if KeyPartition("a", "bc") == KeyPartition("ab", "c") && KeyPartition("x", "yz") == KeyPartition("xy", "z") {
		t.Error("namespace and key run together")
	}
}

func TestNewUUIDInEveryPartition(t *testing.T) {
	t.Parallel()
	for p := range int16(Partitions) {
		u := NewUUIDIn(p)
		if Partition(u) != p || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("NewUUIDIn(%d) = %s: partition %d, version %d, variant %v", p, u, Partition(u), u.Version(), u.Variant())
		}
	}
	id := NewExecutionIDForKey("default", "order-1")
	if id.Partition != 94 || Partition(id.UUID) != 94 {
		t.Fatalf("NewExecutionIDForKey placed %s, want partition 94 for its id and its uuid", id)
	}
}

// A huge input is kept whole in the error's Input but quoted short in
// its message: a console or log line must not grow with what was sent.
func TestParseErrorQuotesLongInputShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 1<<20)
	for _, parse := range []func(string) error{
		func(s string) error { _, err := ParseExecutionID(s); return err },
		func(s string) error { _, err := ParseUUID("flow id", s); return err },
	} {
		err := parse(long)
		var pe *ParseError
		if !errors.As(err, &pe) || pe.Input != long {
			t.Fatalf("error %T does not keep the input whole", err)
		}
		if n := len(err.Error()); n > 300 {
			t.Fatalf("the message of a 1 MiB input is %d bytes, want at most 300", n)
		}
	}
}
