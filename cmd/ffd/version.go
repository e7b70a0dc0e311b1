package main

import (
	"fmt"

	"github.com/flowfabric/ffd/internal/version"
)

// VersionCmd prints what build this is.
type VersionCmd struct {
	JSON bool `name:"json" help:"Print as JSON."`
}

// Run prints the version.
func (c *VersionCmd) Run(g *Globals) error {
	v := version.Get()
	if c.JSON {
		return writeJSON(g.stdout, v)
	}
	_, err := fmt.Fprintln(g.stdout, v)
	return err
}
