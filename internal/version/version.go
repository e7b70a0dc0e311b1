// Package version reports what build of ffd is running, from the
// information the Go toolchain stamps into every binary: the module
// version (a release tag when installed with `go install ...@vX.Y.Z`, a
// pseudo-version or "(devel)" otherwise) and, for builds from a checkout,
// the commit, its time and whether the tree had local changes.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is one build's identity.
type Info struct {
	// Version is the module version: a tag such as v0.1.0, a
	// pseudo-version, or "(devel)" when the toolchain knew neither.
	Version string `json:"version"`
	// Commit is the VCS revision built from; empty when unknown.
	Commit string `json:"commit,omitempty"`
	// Time is the commit's time (RFC 3339); empty when unknown.
	Time string `json:"time,omitempty"`
	// Modified is true when the tree had uncommitted changes.
	Modified bool `json:"modified,omitempty"`
	// Go is the toolchain that built the binary.
	Go string `json:"go"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Stamped is the version a packaging build sets with -ldflags "-X
// github.com/flowfabric/ffd/internal/version.Stamped=v1.2.3"
// (deploy/package/build): it wins over what the toolchain read, which
// is "(devel)" or a pseudo-version for a build from a checkout.
var Stamped string

// Get reads the running binary's build information.
func Get() Info {
	info := Info{Version: "(devel)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		info = fromBuildInfo(bi, info)
	}
	if Stamped != "" {
		info.Version = Stamped
	}
	return info
}

// fromBuildInfo fills info from bi; split from Get so tests can feed it.
func fromBuildInfo(bi *debug.BuildInfo, info Info) Info {
	if v := bi.Main.Version; v != "" {
		info.Version = v
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Commit = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one-line form `ffd version` prints, for example
// "ffd v0.1.0 (go1.26.8 linux/amd64)" or
// "ffd (devel) commit 3acbd84a1b2c, 2026-11-22T10:00:00Z, modified (go1.26.8 linux/amd64)".
func (i Info) String() string {
	s := "ffd " + i.Version
	if i.Commit != "" {
		commit := i.Commit
		if len(commit) > 12 {
			commit = commit[:12]
		}
		s += " commit " + commit
		if i.Time != "" {
			s += ", " + i.Time
		}
		if i.Modified {
			s += ", modified"
		}
	}
	return s + fmt.Sprintf(" (%s %s)", i.Go, i.Platform)
}
