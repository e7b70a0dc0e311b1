package leases

import (
	"regexp"
	"strings"
	"testing"
)

// namePattern is the form validName checks, as the regular expression it
// replaced (and the SQL API renders); the fuzz test holds the two equal.
var namePattern = regexp.MustCompile(NamePattern)

// FuzzValidName: the byte loop accepts exactly what the pattern accepts.
// `go test -fuzz FuzzValidName -run '^$' ./internal/leases` explores past
// the seed corpus (testdata/fuzz/FuzzValidName and the f.Add calls).
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", "lane.1:x-y_z", "a b", "é", "\x00", "a\n", strings.Repeat("a", 128), strings.Repeat("a", 129), "ÿ", "/", "@", "[", "`", "{"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := validName(s), namePattern.MatchString(s); got != want {
			t.Fatalf("validName(%q) = %v, the pattern says %v", s, got, want)
		}
	})
}
