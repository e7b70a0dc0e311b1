package ident

import (
	"strings"
	"testing"

	"github.com/flowfabric/ffd/ffdtype"
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
		back, err := ffdtype.ParseExecutionID(id.String())
		if err != nil || back != id {
			t.Fatalf("ParseExecutionID(%s) = %v, %v; want the same id", id, back, err)
		}
	}
	member := NewExecutionIDIn(200)
	if member.Partition != 200 || !strings.HasPrefix(member.String(), "{fp:200}:") {
		t.Fatalf("NewExecutionIDIn(200) = %s, want partition 200", member)
	}
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

// TestLastBytesFor derives InPartition's constants from the CRC itself.
func TestLastBytesFor(t *testing.T) {
	t.Parallel()
	for j, k := range lastBytesFor {
		if got := CRC16([]byte{byte(k >> 8), byte(k)}); got != 1<<j {
			t.Errorf("CRC16 of 0x%04x = 0x%04x, want 0x%04x", k, got, 1<<j)
		}
	}
}

func TestInPartition(t *testing.T) {
	t.Parallel()
	for _, u := range []uuid.UUID{{}, uuid.Max, uuid.MustParse("2d7c9a4e-51b6-4f0e-8e3a-6a1f0c9b7d25"), NewUUID(), uuid.New()} {
		for p := range int16(Partitions) {
			got := InPartition(u, p)
			if Partition(got) != p {
				t.Fatalf("InPartition(%s, %d) = %s on partition %d", u, p, got, Partition(got))
			}
			if [14]byte(got[:14]) != [14]byte(u[:14]) {
				t.Fatalf("InPartition(%s, %d) = %s: changed more than the last two bytes", u, p, got)
			}
			if again := InPartition(got, p); again != got {
				t.Fatalf("InPartition(%s, %d) = %s, then %s from itself: not the same uuid", u, p, got, again)
			}
		}
	}
}

// FuzzInPartition holds InPartition to its contract for any 16 bytes.
func FuzzInPartition(f *testing.F) {
	f.Add(make([]byte, 16), int16(0))
	f.Add([]byte("0123456789abcdef"), int16(255))
	f.Fuzz(func(t *testing.T, b []byte, p int16) {
		if len(b) != 16 || p < 0 || p >= Partitions {
			return
		}
		u := uuid.UUID(b)
		got := InPartition(u, p)
		if Partition(got) != p || [14]byte(got[:14]) != [14]byte(u[:14]) || InPartition(u, p) != got {
			t.Fatalf("InPartition(%s, %d) = %s on partition %d", u, p, got, Partition(got))
		}
	})
}
