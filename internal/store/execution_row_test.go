package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/flowfabric/ffd/internal/store"
	"github.com/flowfabric/ffd/internal/testdb"
)

// Executions are scanned by position: the scan's fields must follow
// execColumns, each field's db tag naming the column at its place.
func TestExecutionRowMatchesColumns(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db := testdb.New(t)
	rows, err := db.Pool.Query(ctx, `SELECT `+store.ExecColumns+` FROM ff_execution e LIMIT 0`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	tags, inOrder := store.ExecutionRowTags()
	if !inOrder {
		t.Fatal("executionRow's scan destinations are not its fields in order")
	}
	if !slices.Equal(tags, cols) {
		t.Fatalf("executionRow's fields are tagged\n%v\nbut the columns are\n%v", tags, cols)
	}
}
