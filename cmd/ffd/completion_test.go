package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// The shell's completion request (COMP_LINE) is answered from the
// command model: subcommands, their subcommands and their flags.
// Not parallel: it sets COMP_LINE.
func TestShellCompletion(t *testing.T) {
	for line, want := range map[string][]string{
		"ffd ex":                  {"exec"},
		"ffd exec l":              {"list"},
		"ffd exec list --la":      {"--lane"},
		"ffd schedule create --r": {"--replace"},
		"ffd compl":               {"completion"},
	} {
		t.Setenv("COMP_LINE", line)
		var out bytes.Buffer
		code := run(context.Background(), nil, &out, io.Discard)
		got := strings.Fields(out.String())
		if code != 0 || strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("completing %q: exit %d, %q; want %q", line, code, got, want)
		}
	}
}

// `ffd completion SHELL` prints the hook that makes the shell ask ffd.
func TestCompletionPrintsTheShellHook(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash": "complete -C /usr/bin/ffd ffd",
		"zsh":  "bashcompinit",
		"fish": "complete -f -c ffd",
	} {
		code, out, errOut := runFFD(t, "completion", shell, "--bin", "/usr/bin/ffd")
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("ffd completion %s: exit %d, %q (%s); want %q", shell, code, out, errOut, want)
		}
	}
	if code, _, _ := runFFD(t, "completion", "tcsh"); code != 2 {
		t.Errorf("ffd completion tcsh: exit %d, want 2", code)
	}
}
