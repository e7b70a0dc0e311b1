package daemon

import (
	"strconv"
	"testing"
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
