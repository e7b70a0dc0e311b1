package cascade_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/store"
)

// A dispatch that only makes work ready commits without waiting for its
// WAL flush (what it wrote is re-made from its undispatched event if a
// crash takes it back); one that skips a downstream writes completion
// events, which consumers read, and commits synchronously; so does every
// dispatch in the routed form (a distributed Postgres). A dispatch runs
// on generic plans after its take, but in the routed form (Citus plans
// some of its statements only with their values). Both are read inside
// each dispatch transaction, after its last statement. Not parallel: the
// routed case sets store.RouteAll, which is process-wide (the package's
// parallel tests start once this one is done).
func TestDispatchCommitMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		routed bool
		ok     bool   // the upstream succeeds (its downstream made ready) or fails (skipped)
		want   string // synchronous_commit at the dispatch's end
		plans  string // plan_cache_mode at the dispatch's end
	}{
		{"ready", false, true, "off", "force_generic_plan"},
		{"skipped", false, false, "on", "force_generic_plan"},
		{"ready, routed", true, true, "on", "auto"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.routed {
				defer store.RouteAll()()
			}
			f := setup(t)
			var modes []string
			f.d.SetStep(func(ctx context.Context, tx pgx.Tx, name string) error {
				if name != "marked" {
					return nil
				}
				var mode, plans string
				err := tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('plan_cache_mode')`).Scan(&mode, &plans)
				modes = append(modes, mode)
				if err == nil && plans != tc.plans {
					t.Errorf("plan_cache_mode in a dispatch: %q, want %q (set by its take)", plans, tc.plans)
				}
				return err
			})
			g := f.submit(nil, "a->b")
			f.run(g, "a", tc.ok)
			f.drain()
			want := map[string]ffdtype.State{"a": ffdtype.StateCompleted, "b": ffdtype.StatePending}
			if !tc.ok {
				want = map[string]ffdtype.State{"a": ffdtype.StateFailed, "b": ffdtype.StateSkipped}
			}
			f.expect(g, want)
			if len(modes) == 0 || modes[0] != tc.want {
				t.Fatalf("synchronous_commit in the dispatches: %v; want the first (a's event) %q", modes, tc.want)
			}
			var mode string
			if err := f.Pool.QueryRow(f.Ctx, `SELECT current_setting('synchronous_commit')`).Scan(&mode); err != nil || mode != "on" {
				t.Fatalf("synchronous_commit of a session after the dispatches: %q, %v; want on (the setting is the transaction's only)", mode, err)
			}
		})
	}
}
