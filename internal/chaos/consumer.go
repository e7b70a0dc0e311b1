//go:build linux

package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// eventKey names an outbox event: its stream and id.
type eventKey struct {
	stream string
	id     int64
}

// catchUpTimeout bounds the wait for a consumer to print every event once
// the system has drained.
const catchUpTimeout = time.Minute

// verifyConsumers checks that each consumer printed every outbox event at
// least once and nothing else; what it printed more than once is counted
// (dedupe by event id removes it).
func (h *harness) verifyConsumers(ctx context.Context) {
	want := map[eventKey]bool{}
	completions, leases, err := store.EventIDs(ctx, h.pool)
	if err != nil {
		h.violation("read events: %v", err)
		return
	}
	for _, id := range completions {
		want[eventKey{string(ffdtype.StreamCompletion), id}] = true
	}
	for _, id := range leases {
		want[eventKey{string(ffdtype.StreamLease), id}] = true
	}
	for _, p := range []*proc{h.cursor, h.wal} {
		deadline := time.Now().Add(catchUpTimeout)
		for {
			seen, dups, err := readEvents(p.outPath)
			if err != nil {
				h.violation("%s output: %v", p.name, err)
				break
			}
			var missing []string
			for k := range want {
				if seen[k] == 0 {
					missing = append(missing, fmt.Sprintf("%s/%d", k.stream, k.id))
				}
			}
			if len(missing) == 0 || time.Now().After(deadline) || ctx.Err() != nil {
				var unknown []string
				for k := range seen {
					if !want[k] {
						unknown = append(unknown, fmt.Sprintf("%s/%d", k.stream, k.id))
					}
				}
				if len(missing) > 0 {
					h.violation("%s never printed %d of %d events (e.g. %s)", p.name, len(missing), len(want), sample5(missing))
				}
				if len(unknown) > 0 {
					h.violation("%s printed %d events that are not in the outbox (e.g. %s)", p.name, len(unknown), sample5(unknown))
				}
				h.mu.Lock()
				if p == h.cursor {
					h.report.CursorDuplicates = dups
				} else {
					h.report.WALDuplicates = dups
				}
				h.mu.Unlock()
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// readEvents reads a consumer's JSON lines: how often each event was
// printed, and how many prints were repeats. A line cut short by a kill
// is not an event and is skipped.
func readEvents(path string) (map[eventKey]int, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	seen := map[eventKey]int{}
	dups := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var ev struct {
			Stream  string `json:"stream"`
			EventID int64  `json:"event_id"`
		}
		line := sc.Bytes()
		if json.Unmarshal(line, &ev) != nil || ev.Stream == "" {
			continue
		}
		k := eventKey{ev.Stream, ev.EventID}
		if seen[k] > 0 {
			dups++
		}
		seen[k]++
	}
	return seen, dups, sc.Err()
}

func sample5(s []string) string {
	sort.Strings(s)
	if len(s) > 5 {
		s = s[:5]
	}
	return strings.Join(s, ", ")
}
