package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/flowfabric/ffd/internal/pgserver"
	"github.com/flowfabric/ffd/internal/testdb"
)

// A second `ffd dev` on a data directory or a port that a running server
// holds says so, naming the other server's URL, and never claims to be
// ready.
func TestSecondDevSaysTheFirstRuns(t *testing.T) {
	t.Parallel()
	dir := testdb.ServerDir(t)
	srv, err := pgserver.Start(context.Background(), pgserver.Config{DataDir: dir + "/pg"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop(context.Background()) })
	port := strconv.Itoa(srv.Port())

	code, out, errOut := runFFD(t, "dev", "--data-dir", dir+"/pg", "--port", "0")
	if code == 0 || strings.Contains(out, "ready") || !strings.Contains(errOut, "in use by a running PostgreSQL") || !strings.Contains(errOut, "127.0.0.1:"+port) {
		t.Errorf("ffd dev on a held data directory: exit %d, stdout %q, stderr %q; want a refusal naming the running server's URL", code, out, errOut)
	}
	code, out, errOut = runFFD(t, "dev", "--data-dir", dir+"/other", "--port", port)
	if code == 0 || strings.Contains(out, "ready") || !strings.Contains(errOut, "port "+port+" on 127.0.0.1 is in use") {
		t.Errorf("ffd dev on a taken port: exit %d, stdout %q, stderr %q; want a refusal naming the port", code, out, errOut)
	}
}
