package pgserver

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeBin makes dir hold an initdb and a postgres.
func fakeBin(t *testing.T, dir string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(dir, exe(tool)), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Among the packagers' directories the newest major version wins, a
// directory without both programs is passed over, and no match is "".
func TestSearchPrefersTheNewestServer(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	fakeBin(t, filepath.Join(root, "opt", "postgresql@14", "bin"))
	want := fakeBin(t, filepath.Join(root, "opt", "postgresql@16", "bin"))
	if err := os.MkdirAll(filepath.Join(root, "opt", "postgresql@18", "bin"), 0o755); err != nil { // no programs
		t.Fatal(err)
	}
	fakeBin(t, filepath.Join(root, "Versions", "15", "bin"))
	patterns := []string{filepath.Join(root, "opt", "postgresql@*", "bin"), filepath.Join(root, "Versions", "*", "bin")}
	if got := search(patterns); got != want {
		t.Fatalf("search chose %q, want %q", got, want)
	}
	if got := search([]string{filepath.Join(root, "nowhere", "*")}); got != "" {
		t.Fatalf("search with no match chose %q", got)
	}
}

func TestMajorOf(t *testing.T) {
	t.Parallel()
	for dir, want := range map[string]float64{
		"/usr/lib/postgresql/17/bin":                          17,
		"/opt/homebrew/opt/postgresql@16/bin":                 16,
		"/Applications/Postgres.app/Contents/Versions/15/bin": 15,
		"/usr/pgsql-14/bin":                                   14,
		"/opt/homebrew/opt/postgresql/bin":                    0,
	} {
		if got := majorOf(dir); got != want {
			t.Errorf("majorOf(%q) = %v, want %v", dir, got, want)
		}
	}
}

// Every system has places to look and a way to install.
func TestEverySystemHasPatternsAndAHint(t *testing.T) {
	t.Parallel()
	for _, goos := range []string{"linux", "darwin", "windows"} {
		if len(binDirPatterns(goos)) == 0 || !strings.Contains(installHint(goos), EnvBinDir) {
			t.Errorf("%s: patterns %v, hint %q", goos, binDirPatterns(goos), installHint(goos))
		}
	}
}

// FFD_PG_BIN_DIR wins over every search, and one that holds no server is
// an error naming it rather than a silent fallback.
func TestFindBinDirHonoursTheEnvironment(t *testing.T) {
	dir := fakeBin(t, filepath.Join(t.TempDir(), "bin"))
	t.Setenv(EnvBinDir, dir)
	if got, err := FindBinDir(); err != nil || got != dir {
		t.Fatalf("FindBinDir() = %q, %v; want %q", got, err, dir)
	}
	empty := t.TempDir()
	t.Setenv(EnvBinDir, empty)
	if _, err := FindBinDir(); err == nil || !strings.Contains(err.Error(), empty) {
		t.Fatalf("FindBinDir() with an empty %s: %v; want an error naming it", EnvBinDir, err)
	}
}
