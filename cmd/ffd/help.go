package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/flowfabric/ffd/ffdtype"
)

// Exit codes, the same for every command (docs/operations.md, "Exit
// codes").
const (
	exitOK      = 0
	exitFailed  = 1 // what was asked failed: the database, a conflict, a missing object
	exitBadArgs = 2 // what was typed is wrong: an unknown flag, a value out of range, a malformed id
)

// help prints a command's help with its own flags in full and the global
// flags every command shares named on one line: they would otherwise be
// most of every page. `ffd --help` describes them.
func help(options kong.HelpOptions, ctx *kong.Context) error {
	selected := ctx.Selected()
	if selected == nil {
		return kong.DefaultHelpPrinter(options, ctx)
	}
	var names []string
	var hidden []*kong.Flag
	for _, f := range ctx.Model.Node.Flags {
		if f.Hidden || f.Name == "help" {
			continue
		}
		names = append(names, "--"+f.Name)
		f.Hidden = true
		hidden = append(hidden, f)
	}
	err := kong.DefaultHelpPrinter(options, ctx)
	for _, f := range hidden {
		f.Hidden = false
	}
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(ctx.Stdout, "\nGlobal flags (every command; `ffd --help` describes them):\n  %s\n", wrapWords(names, 76, "  "))
	return err
}

// wrapWords joins words with spaces, breaking lines before width.
func wrapWords(words []string, width int, indent string) string {
	var b strings.Builder
	line := 0
	for i, w := range words {
		if i > 0 {
			if line+1+len(w) > width {
				b.WriteString("\n" + indent)
				line = 0
			} else {
				b.WriteByte(' ')
				line++
			}
		}
		b.WriteString(w)
		line += len(w)
	}
	return b.String()
}

// usageError prints a command-line error the way every command does:
// "ffd: <what>", then where the flags are described.
func usageError(w io.Writer, err error, command string) int {
	fmt.Fprintln(w, "ffd:", err)
	if command != "" {
		fmt.Fprintf(w, "ffd: see 'ffd %s --help'\n", command)
	} else {
		fmt.Fprintln(w, "ffd: see 'ffd --help'")
	}
	return exitBadArgs
}

// argError is a flag or argument a command found wrong once it ran (a
// malformed URL, JSON that does not parse): exitBadArgs, as a flag kong
// refuses.
type argError struct{ err error }

func (e *argError) Error() string { return e.err.Error() }
func (e *argError) Unwrap() error { return e.err }

// badArg is an argError saying what is wrong.
func badArg(format string, args ...any) error { return &argError{fmt.Errorf(format, args...)} }

// codeOf is the exit code of an error a command returned: exitBadArgs for
// input refused as invalid, exitFailed for the rest.
func codeOf(err error) int {
	var ve *ffdtype.ValidationError
	var ae *argError
	if errors.As(err, &ve) || errors.As(err, &ae) {
		return exitBadArgs
	}
	var oe *outcomeError
	if errors.As(err, &oe) {
		return oe.code
	}
	return exitFailed
}
