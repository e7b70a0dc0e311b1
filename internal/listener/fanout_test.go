package listener

import (
	"strconv"
	"testing"
	"time"
)

func TestParseIDRange(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		lo, hi int64
		ok     bool
	}{
		{"42", 42, 42, true},
		{"7-19", 7, 19, true},
		{"5-5", 5, 5, true},
		{"", 0, 0, false},
		{"9-3", 0, 0, false},
		{"1-", 0, 0, false},
		{"-4", 0, 0, false},
		{"a-b", 0, 0, false},
		{"1-2-3", 0, 0, false},
	} {
		lo, hi, ok := parseIDRange(c.in)
		if lo != c.lo || hi != c.hi || ok != c.ok {
			t.Errorf("parseIDRange(%q) = %d, %d, %v; want %d, %d, %v", c.in, lo, hi, ok, c.lo, c.hi, c.ok)
		}
	}
}

// Whatever a payload holds, a range that parses is ordered and round-trips.
func FuzzParseIDRange(f *testing.F) {
	for _, s := range []string{"1", "1-2", "", "-", "9-3", "0-9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lo, hi, ok := parseIDRange(s)
		if !ok {
			return
		}
		if hi < lo {
			t.Fatalf("parseIDRange(%q) = %d > %d", s, lo, hi)
		}
		want := strconv.FormatInt(lo, 10)
		if lo != hi || s != want {
			want += "-" + strconv.FormatInt(hi, 10)
		}
		if lo2, hi2, _ := parseIDRange(want); lo2 != lo || hi2 != hi {
			t.Fatalf("%q re-parsed as %d-%d, want %d-%d", want, lo2, hi2, lo, hi)
		}
	})
}

// Each topic's payload goes to its worker's queue; what does not fit, or
// a range too wide to expand, is reported dropped and (for the wide range)
// turned into a sweep request; other topics and bad payloads go nowhere.
func TestFanoutRoutesAndDrops(t *testing.T) {
	t.Parallel()
	var dropped []string
	f := NewFanout(2, func(q string) { dropped = append(dropped, q) })
	f.Handle(Notification{Topic: Completion, Payload: "7-8"})
	f.Handle(Notification{Topic: Completion, Payload: "9"}) // the queue holds 2
	f.Handle(Notification{Topic: Lease, Payload: "11"})
	f.Handle(Notification{Topic: Lease, Payload: "due:1700000000000"})
	f.Handle(Notification{Topic: Ready, Payload: "default"})
	f.Handle(Notification{Topic: Completion, Payload: "garbage"})
	f.Handle(Notification{Topic: Lease, Payload: "1-100000"})

	if got := []int64{<-f.Events(), <-f.Events()}; got[0] != 7 || got[1] != 8 || len(f.Events()) != 0 {
		t.Errorf("cascade queue got %v and %d more; want [7 8] and nothing more", got, len(f.Events()))
	}
	if id := <-f.LeaseIDs(); id != 11 || len(f.LeaseIDs()) != 0 {
		t.Errorf("timeout queue got %d and %d more; want 11 alone", id, len(f.LeaseIDs()))
	}
	if at := <-f.DueAt(); !at.Equal(time.UnixMilli(1700000000000)) {
		t.Errorf("due time %v, want %v", at, time.UnixMilli(1700000000000))
	}
	if want := []string{QueueCascade, QueueTimeout}; len(dropped) != 2 || dropped[0] != want[0] || dropped[1] != want[1] {
		t.Errorf("dropped %v, want %v", dropped, want)
	}
	select {
	case full := <-f.SweepNow():
		if full {
			t.Error("a wide range asked for a full sweep; want a plain one")
		}
	default:
		t.Error("a range too wide to expand asked for no sweep")
	}
	f.RequestSweep(false)
	f.RequestSweep(true) // upgrades the pending request
	if full := <-f.SweepNow(); !full {
		t.Error("a request after a connect did not upgrade the pending sweep to a full one")
	}
	f.CancelSiblings()
	f.CancelSiblings() // coalesces
	<-f.Siblings()
	if len(f.Siblings()) != 0 {
		t.Error("two sibling nudges were not coalesced into one")
	}
}
