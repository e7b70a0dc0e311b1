package store

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd/ffdtype"
)

// Notices send one payload per channel, each item once, the soonest due
// time only, and split a payload only where it would pass the limit.
func TestNoticesPayloads(t *testing.T) {
	t.Parallel()
	n := &Notices{}
	if !n.Empty() {
		t.Fatal("a new Notices is not empty")
	}
	n.Completions(3, true)
	n.Completions(3, true)
	n.Completions(9, false) // a bare wake, covered by the partition list
	n.Ready("a")
	n.Ready("b")
	n.Ready("a")
	at := time.UnixMilli(1_700_000_000_000)
	n.due(at.Add(time.Second))
	n.due(at)
	n.LeaseEvents(4)
	id := ffdtype.ExecutionID{Partition: 7, UUID: uuid.MustParse("01890000-0000-7000-8000-0000000000aa")}
	n.Revoked(id, 0)
	n.Ready("c")
	n.Completions(1, false)
	cs, ps := n.payloads()
	got := map[string]string{}
	for i, c := range cs {
		if _, dup := got[c]; dup {
			t.Errorf("two payloads on %s", c)
		}
		got[c] = ps[i]
	}
	want := map[string]string{
		ChannelCompletion: "3",
		ChannelLease:      "4,due:1700000000000",
		ChannelReady:      "a,b,c",
		ChannelRevoke:     "7:01890000-0000-7000-8000-0000000000aa:0",
	}
	for c, p := range want {
		if got[c] != p {
			t.Errorf("%s payload %q, want %q", c, got[c], p)
		}
	}
	if len(got) != len(want) {
		t.Errorf("payloads %v, want %v", got, want)
	}

	bare := &Notices{}
	bare.Completions(5, false)
	if cs, ps := bare.payloads(); !slices.Equal(cs, []string{ChannelCompletion}) || ps[0] != "" {
		t.Errorf("a bare wake sent %v %q, want one empty %s", cs, ps, ChannelCompletion)
	}

	many := &Notices{}
	lane := strings.Repeat("x", 90)
	for i := range 200 {
		many.Ready(lane + strconv.Itoa(i))
	}
	_, ps = many.payloads()
	var items []string
	for _, p := range ps {
		if len(p) > maxPayload {
			t.Errorf("a payload of %d bytes passes the limit of %d", len(p), maxPayload)
		}
		items = append(items, SplitPayload(p)...)
	}
	if len(ps) < 2 || len(items) != 200 {
		t.Errorf("200 lanes of 92 bytes went in %d payloads holding %d items, want several holding 200", len(ps), len(items))
	}
}

func TestParsePartitions(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want []int16
		ok   bool
	}{
		{"", nil, true},
		{"0", []int16{0}, true},
		{"3,255,3", []int16{3, 255}, true},
		{"256", nil, false},
		{"-1", nil, false},
		{"1,,2", nil, false},
		{"due:17", nil, false},
		{" 1", nil, false},
	} {
		got, ok := ParsePartitions(c.in)
		if ok != c.ok || !slices.Equal(got, c.want) {
			t.Errorf("ParsePartitions(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// Whatever a payload holds, partitions that parse are distinct, in range,
// and parse again from the payload they form.
func FuzzParsePartitions(f *testing.F) {
	for _, s := range []string{"", "0", "1,2,255", "256", "1,1", "-0", "+1", "due:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts, ok := ParsePartitions(s)
		if !ok {
			return
		}
		n := &Notices{}
		seen := map[int16]bool{}
		for _, p := range parts {
			if p < 0 || p >= ffdtype.Partitions || seen[p] {
				t.Fatalf("ParsePartitions(%q) = %v: out of range or repeated", s, parts)
			}
			seen[p] = true
			n.Completions(p, true)
		}
		if len(parts) == 0 {
			return
		}
		_, ps := n.payloads()
		again, ok := ParsePartitions(ps[0])
		if !ok || !slices.Equal(again, parts) {
			t.Fatalf("%v formed %q, which parses as %v, %v", parts, ps[0], again, ok)
		}
	})
}
