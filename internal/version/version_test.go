package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	t.Parallel()
	base := Info{Version: "(devel)", Go: "go1.26.8", Platform: "linux/amd64"}
	for _, c := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"release", debug.BuildInfo{Main: debug.Module{Version: "v0.1.0"}}, "ffd v0.1.0 (go1.26.8 linux/amd64)"},
		{"no version", debug.BuildInfo{}, "ffd (devel) (go1.26.8 linux/amd64)"},
		{"checkout", debug.BuildInfo{
			Main: debug.Module{Version: "v0.1.1-0.20261122100000-3acbd84a1b2c+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "3acbd84a1b2c3d4e5f60718293a4b5c6d7e8f901"},
				{Key: "vcs.time", Value: "2026-11-22T10:00:00Z"},
				{Key: "vcs.modified", Value: "true"},
			},
		}, "ffd v0.1.1-0.20261122100000-3acbd84a1b2c+dirty commit 3acbd84a1b2c, 2026-11-22T10:00:00Z, modified (go1.26.8 linux/amd64)"},
	} {
		if got := fromBuildInfo(&c.bi, base).String(); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
}

// The test binary itself carries build information: Get never returns an
// empty version or platform.
func TestGetDescribesThisBinary(t *testing.T) {
	t.Parallel()
	i := Get()
	if i.Version == "" || i.Go == "" || i.Platform == "" {
		t.Fatalf("Get() = %+v; want a version, a toolchain and a platform", i)
	}
}

// A packaging build's stamp names the version, whatever the toolchain
// read (a package once reported "(devel)").
func TestStampedVersionWins(t *testing.T) {
	old := Stamped
	t.Cleanup(func() { Stamped = old })
	Stamped = "v0.3.0"
	if got := Get().Version; got != "v0.3.0" {
		t.Fatalf("stamped v0.3.0, Get says %q", got)
	}
}
