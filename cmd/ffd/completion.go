package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CompletionCmd prints the shell code that completes ffd's commands and
// flags. The completion itself is kongplete's: the shell runs ffd with
// COMP_LINE set, and ffd answers from its own command model (run, before
// parsing), so completions always match the binary.
type CompletionCmd struct {
	Shell string `arg:"" enum:"bash,zsh,fish" help:"The shell: bash, zsh or fish."`
	Bin   string `name:"bin" help:"Path of the ffd binary the shell should run (default: this one)."`
}

// completionScripts are the shells' hooks; {bin} is the binary's path.
var completionScripts = map[string]string{
	"bash": "complete -C {bin} ffd\n",
	"zsh":  "autoload -U +X bashcompinit && bashcompinit\ncomplete -C {bin} ffd\n",
	"fish": `function __complete_ffd
    set -lx COMP_LINE (commandline -cp)
    test -z (commandline -ct)
    and set COMP_LINE "$COMP_LINE "
    {bin}
end
complete -f -c ffd -a "(__complete_ffd)"
`,
}

// Run prints the hook.
func (c *CompletionCmd) Run(_ context.Context, g *Globals) error {
	bin := c.Bin
	if bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find this binary's path: %w", err)
		}
		if bin, err = filepath.Abs(exe); err != nil {
			return fmt.Errorf("find this binary's path: %w", err)
		}
	}
	_, err := fmt.Fprint(g.stdout, strings.ReplaceAll(completionScripts[c.Shell], "{bin}", bin))
	return err
}
