package listener

import (
	"slices"
	"testing"
	"time"
)

// Completion payloads mark partitions (coalesced, never dropped), lease
// payloads hand due times to the timeout worker (what does not fit is
// reported dropped); partitions of lease events, other topics and bad
// payloads go nowhere.
func TestFanoutRoutesAndDrops(t *testing.T) {
	t.Parallel()
	var dropped []string
	f := NewFanout(1, func(q string) { dropped = append(dropped, q) })
	f.Handle(Notification{Topic: Completion, Payload: "7,8"})
	f.Handle(Notification{Topic: Completion, Payload: "8,3"}) // 8 is marked already
	f.Handle(Notification{Topic: Completion, Payload: ""})    // born dispatched: nothing to do
	f.Handle(Notification{Topic: Completion, Payload: "garbage"})
	f.Handle(Notification{Topic: Completion, Payload: "1,256"}) // 256 is no partition: all ignored
	f.Handle(Notification{Topic: Lease, Payload: "11,due:1700000000000"})
	f.Handle(Notification{Topic: Lease, Payload: "due:1700000000001"}) // the queue holds 1
	f.Handle(Notification{Topic: Ready, Payload: "default"})

	select {
	case <-f.Dispatch():
	default:
		t.Fatal("marked partitions left no token for the cascade pool")
	}
	if got := f.TakePartitions(2); !slices.Equal(got, []int16{7, 8}) {
		t.Errorf("first take = %v, want [7 8]", got)
	}
	select {
	case <-f.Dispatch():
	default:
		t.Error("a partial take left no token for the partitions that remain")
	}
	if got := f.TakePartitions(0); !slices.Equal(got, []int16{3}) {
		t.Errorf("second take = %v, want [3]", got)
	}
	if got := f.TakePartitions(0); len(got) != 0 {
		t.Errorf("third take = %v, want nothing", got)
	}
	f.MarkPartitions([]int16{3}) // marked again after a take: taken again
	<-f.Dispatch()
	if got := f.TakePartitions(0); !slices.Equal(got, []int16{3}) {
		t.Errorf("take after re-marking = %v, want [3]", got)
	}
	if at := <-f.DueAt(); !at.Equal(time.UnixMilli(1700000000000)) {
		t.Errorf("due time %v, want %v", at, time.UnixMilli(1700000000000))
	}
	if want := []string{QueueTimeout}; !slices.Equal(dropped, want) {
		t.Errorf("dropped %v, want %v", dropped, want)
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

// However many workers take at once, every marked partition is taken
// exactly once.
func TestFanoutTakesEachPartitionOnce(t *testing.T) {
	t.Parallel()
	f := NewFanout(1, nil)
	for p := range int16(256) {
		f.MarkPartitions([]int16{p, p})
	}
	got := make(chan []int16)
	for range 4 {
		go func() {
			var mine []int16
			for {
				select {
				case <-f.Dispatch():
					mine = append(mine, f.TakePartitions(10)...)
				case <-time.After(50 * time.Millisecond):
					got <- mine
					return
				}
			}
		}()
	}
	var all []int16
	for range 4 {
		all = append(all, <-got...)
	}
	slices.Sort(all)
	if len(all) != 256 {
		t.Fatalf("took %d partitions, want each of 256 once", len(all))
	}
	for i, p := range all {
		if p != int16(i) {
			t.Fatalf("sorted takes hold %d at %d: a partition taken twice or never", p, i)
		}
	}
}
