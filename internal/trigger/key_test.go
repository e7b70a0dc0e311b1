package trigger

import (
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/internal/ident"
)

// Key's suffixes reach every partition whatever comes before them: the
// CRC is linear, so a suffix moves a key's CRC by the suffix's own CRC
// (with the same number of bytes after it), and the low bytes of those of
// the keySuffixes three-hex-digit suffixes take all 256 values. Keys of
// many events then land on their event's partition, each with the first
// suffix that places it.
func TestKeySuffixes(t *testing.T) {
	t.Parallel()
	reached := map[byte]bool{}
	for i := range keySuffixes {
		reached[byte(ident.CRC16(fmt.Appendf(nil, "%03x", i)))] = true
	}
	if len(reached) != ident.Partitions {
		t.Fatalf("the suffixes move a key's partition by %d of %d values", len(reached), ident.Partitions)
	}
	for i := range 2000 {
		ns, trig, event := fmt.Sprint("ns-", i%7), fmt.Sprint("trigger-", i%13), uuid.New()
		if i%2 == 0 {
			event = ident.NewUUIDIn(int16(i % ident.Partitions))
		}
		k := Key(ns, trig, event)
		if got, want := ident.KeyPartition(ns, k), ident.Partition(event); got != want {
			t.Fatalf("Key(%q, %q, %s) = %q on partition %d, want the event's %d", ns, trig, event, k, got, want)
		}
		base := "ffd-trigger:" + trig + ":" + event.String() + ":"
		for j := range keySuffixes { // the first suffix that places it, searched
			if s := fmt.Sprintf("%s%03x", base, j); ident.KeyPartition(ns, s) == ident.Partition(event) {
				if s != k {
					t.Fatalf("Key(%q, %q, %s) = %q, want the first suffix that places it: %q", ns, trig, event, k, s)
				}
				break
			}
		}
		if again := Key(ns, trig, event); again != k {
			t.Fatalf("Key(%q, %q, %s) = %q, then %q", ns, trig, event, k, again)
		}
	}
}
