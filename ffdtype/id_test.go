package ffdtype

import (
	"errors"
	"strings"
	"testing"
)

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
		if !errors.Is(err, ErrValidation) {
			t.Errorf("ParseExecutionID(%q) error %v does not match ErrValidation", s, err)
		}
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Kind != KindMalformedID || ve.Value != s || !strings.Contains(err.Error(), "\""+s+"\"") && s != "" {
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
		if !errors.Is(err, ErrValidation) || !strings.Contains(err.Error(), "flow id") {
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
			if !errors.Is(err, ErrValidation) {
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

// A huge input is quoted short: a console or log line must not grow with
// what was sent.
func TestParseQuotesLongInputShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 1<<20)
	for _, parse := range []func(string) error{
		func(s string) error { _, err := ParseExecutionID(s); return err },
		func(s string) error { _, err := ParseUUID("flow id", s); return err },
	} {
		err := parse(long)
		var ve *ValidationError
		if !errors.As(err, &ve) || !strings.HasPrefix(long, strings.TrimSuffix(ve.Value, "…")) || len(ve.Value) > maxQuoted+len("…") {
			t.Fatalf("error %v does not quote the input's start, shortened", err)
		}
		if n := len(err.Error()); n > 300 {
			t.Fatalf("the message of a 1 MiB input is %d bytes, want at most 300", n)
		}
	}
}
