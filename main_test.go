package ffd_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/flowfabric/ffd/internal/testdb"
)

func TestMain(m *testing.M) {
	if os.Getenv(envBatchWorker) != "" {
		os.Exit(batchWorkerMain())
	}
	// The runnable examples read FFD_DATABASE_URL, as a program would.
	db, err := testdb.Open()
	if err != nil {
		fmt.Fprintln(os.Stderr, "example database:", err)
		os.Exit(1)
	}
	db.Pool.Close()
	os.Setenv("FFD_DATABASE_URL", db.URL)
	testdb.Main(m)
}
