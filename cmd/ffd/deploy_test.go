package main

import (
	"net/url"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// envNames lists the environment variables of a kong command struct,
// embedded structs included.
func envNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, envNames(f.Type)...)
			continue
		}
		if env := f.Tag.Get("env"); env != "" {
			out = append(out, env)
		}
	}
	return out
}

// deploy/ffd.env.example names every variable `ffd run` reads (set or
// commented out with its default), and connects as a login role that
// deploy/roles.sql creates for the daemon.
func TestEnvExampleMatchesTheDaemon(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../deploy/ffd.env.example")
	if err != nil {
		t.Fatal(err)
	}
	example := string(b)
	// FFD_MAX_CONNS bounds the other commands' pools; `ffd run` has
	// FFD_POOL_MAX_CONNS.
	skip := map[string]bool{"FFD_MAX_CONNS": true}
	for _, env := range append(envNames(reflect.TypeOf(Globals{})), envNames(reflect.TypeOf(RunCmd{}))...) {
		if skip[env] {
			continue
		}
		if !regexp.MustCompile(`(?m)^#?` + env + `=`).MatchString(example) {
			t.Errorf("deploy/ffd.env.example does not mention %s", env)
		}
	}
	m := regexp.MustCompile(`(?m)^FFD_DATABASE_URL=(\S+)`).FindStringSubmatch(example)
	if m == nil {
		t.Fatal("deploy/ffd.env.example sets no FFD_DATABASE_URL")
	}
	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	roles, err := os.ReadFile("../../deploy/roles.sql")
	if err != nil {
		t.Fatal(err)
	}
	if user := u.User.Username(); user != "ffd_daemon" || !strings.Contains(string(roles), "('"+user+"', 'LOGIN')") {
		t.Errorf("deploy/ffd.env.example connects as %q; want the daemon's login role of deploy/roles.sql, ffd_daemon", user)
	}
}
