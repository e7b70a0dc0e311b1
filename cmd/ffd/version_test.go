package main

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

// `ffd version` and `ffd --version` print the same line, naming the
// build's version and platform; `--json` gives the fields.
func TestVersion(t *testing.T) {
	t.Parallel()
	code, cmd, _ := runFFD(t, "version")
	if code != 0 || !strings.HasPrefix(cmd, "ffd ") || !strings.Contains(cmd, runtime.GOOS+"/"+runtime.GOARCH) {
		t.Fatalf("ffd version: exit %d, %q; want exit 0 and a line naming the build and its platform", code, cmd)
	}
	code, flag, _ := runFFD(t, "--version")
	if code != 0 || flag != cmd {
		t.Fatalf("ffd --version: exit %d, %q; want exit 0 and %q", code, flag, cmd)
	}
	code, js, _ := runFFD(t, "version", "--json")
	var v struct{ Version, Go, Platform string }
	if err := json.Unmarshal([]byte(js), &v); code != 0 || err != nil || v.Version == "" || v.Go != runtime.Version() {
		t.Fatalf("ffd version --json: exit %d, %q (%v); want the version and toolchain as JSON", code, js, err)
	}
}
