package store

import (
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// A constraint is known by its name, and by its name with a shard's id
// after it, as a distributed Postgres names it; not by another name that
// shares its start.
func TestRefusedBy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		code, name string
		want       bool
	}{
		{"23505", "ff_execution_rerun", true},
		{"23505", "ff_execution_rerun_102113", true},
		{"23505", "ff_flow_rerun_7", true},
		{"23514", "ff_execution_rerun", false},
		{"23505", "ff_execution_rerun_", false},
		{"23505", "ff_execution_rerun_p", false},
		{"23505", "ff_execution_rerun_g_102113", false},
		{"23505", "ff_execution", false},
		{"23505", "", false},
	} {
		err := fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: c.code, ConstraintName: c.name})
		if got := refusedBy(err, "23505", "ff_execution_rerun", "ff_flow_rerun"); got != c.want {
			t.Errorf("%s %q: refusedBy = %v, want %v", c.code, c.name, got, c.want)
		}
	}
	shard := &pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "ff_execution_rerun_102113"`}
	if !refusedBy(shard, "23505", "ff_execution_rerun") {
		t.Error("a shard's refusal that names its constraint in the message alone was not recognized")
	}
	if refusedBy(errors.New("23505 ff_execution_rerun"), "23505", "ff_execution_rerun") {
		t.Error("a plain error was taken for Postgres's")
	}
}
