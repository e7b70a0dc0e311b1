package ffd_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flowfabric/ffd"
	"github.com/flowfabric/ffd/ffdtype"
	"github.com/flowfabric/ffd/internal/daemon"
	"github.com/flowfabric/ffd/internal/outbox"
	"github.com/flowfabric/ffd/internal/schedule"
)

// The API's exported aliases all name ffdtype, the public leaf where
// rows, vocabulary and errors are declared once with documented fields:
// an alias of an internal type would show `type X = internal.X` in go
// doc and nothing else, and tie the API to a package callers cannot
// import.
func TestExportedAliasesNameFfdtype(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					if !ts.Assign.IsValid() || !ts.Name.IsExported() {
						continue
					}
					sel, ok := ts.Type.(*ast.SelectorExpr)
					if pkg, _ := sel.X.(*ast.Ident); !ok || pkg == nil || pkg.Name != "ffdtype" || sel.Sel.Name != ts.Name.Name {
						t.Errorf("%s: exported alias %s names %s; an alias must name the ffdtype type of the same name", fset.Position(ts.Pos()), ts.Name, types.ExprString(ts.Type))
					}
				}
			}
		}
	}
}

// exportedTypes are the exported type names declared in the non-test Go
// files of dir, aliases included, by name and position.
func exportedTypes(t *testing.T, dir string) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			for _, d := range f.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
					for _, s := range g.Specs {
						if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
							out[ts.Name.Name] = fset.Position(ts.Pos()).String()
						}
					}
				}
			}
		}
	}
	return out
}

// No type a caller sees is declared again under internal/: a same-named
// exported type there is a twin to keep in step by hand, and the reason
// ffdtype exists. The two names below are shared on purpose: the
// internal Configs configure their own components (none repeats
// ffd.Config), and ffd.Daemon wraps internal/daemon's.
func TestNoInternalTwinOfAPublicType(t *testing.T) {
	t.Parallel()
	public := exportedTypes(t, ".")
	for name := range exportedTypes(t, "ffdtype") {
		public[name] = "ffdtype"
	}
	dirs, err := filepath.Glob("internal/*")
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range dirs {
		for name, at := range exportedTypes(t, dir) {
			if _, twin := public[name]; twin && name != "Config" && name != "Daemon" {
				t.Errorf("%s declares %s again; use ffdtype.%s", at, name, name)
			}
		}
	}
}

// Errors from below the API match the public error types with errors.As,
// fields and all, and a conflict carries the existing object as a public
// type.
func TestErrorsMatchThePublicTypes(t *testing.T) {
	t.Parallel()
	f := setup(t)
	_, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "bad lane"})
	var ve *ffd.ValidationError
	if !errors.As(err, &ve) || ve.Field != "lane" || ve.Kind != ffd.KindInvalidValue || !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("create in a bad lane: %v (as %+v); want a *ffd.ValidationError on lane", err, ve)
	}
	flow, err := f.client.CreateFlow(f.Ctx, ffd.CreateFlowParams{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.SubmitFlow(context.Background(), ffd.SubmitFlowParams{
		Flow:  ffd.CreateFlowParams{ID: flow.Flow.ID},
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "l"}}},
	})
	var ce *ffd.ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ffd.ErrConflict) {
		t.Fatalf("submit an existing flow: %v; want a *ffd.ConflictError", err)
	}
	if got, ok := ce.Existing.(*ffd.Flow); !ok || got.ID != flow.Flow.ID {
		t.Fatalf("conflict's existing object is %T %+v; want the *ffd.Flow %s", ce.Existing, ce.Existing, flow.Flow.ID)
	}
	_, err = f.client.Get(f.Ctx, ffd.ExecutionID{Partition: 3, UUID: flow.Flow.ID})
	var nf *ffd.NotFoundError
	if !errors.As(err, &nf) || nf.Object != "execution" || !errors.Is(err, ffd.ErrNotFound) {
		t.Fatalf("get a missing execution: %v; want a *ffd.NotFoundError", err)
	}

	created, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "errors"})
	if err != nil {
		t.Fatal(err)
	}
	x := created.Execution
	if _, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "errors", Worker: "w/1", Max: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = f.client.Complete(f.Ctx, x.ID, 7, nil)
	var ll *ffd.LeaseLostError
	if !errors.As(err, &ll) || ll.Epoch != 7 || ll.CurrentEpoch != 1 || !errors.Is(err, ffd.ErrLeaseLost) {
		t.Fatalf("complete under a wrong epoch: %v (as %+v); want a *ffd.LeaseLostError naming epoch 7 of 1", err, ll)
	}
	if _, err := f.client.Complete(f.Ctx, x.ID, 1, nil); err != nil {
		t.Fatal(err)
	}
	// AlreadyTerminalError: TestAddFinishedExecutionToFlowIsRefused.
	a, err := f.client.CreateInFlow(f.Ctx, flow.Flow.ID, ffd.CreateParams{Lane: "errors"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.client.CreateInFlow(f.Ctx, flow.Flow.ID, ffd.CreateParams{Lane: "errors"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.client.StageEdge(f.Ctx, ffd.StageEdgeParams{FlowID: flow.Flow.ID, Upstream: a.Execution.ID, Downstream: b.Execution.ID, ExpectedRevision: 99})
	var sr *ffd.StaleRevisionError
	if !errors.As(err, &sr) || sr.Expected != 99 || !errors.Is(err, ffd.ErrStaleRevision) {
		t.Fatalf("stage at a stale revision: %v (as %+v); want a *ffd.StaleRevisionError expecting 99", err, sr)
	}
}

// The public enumerations spell the schema's vocabulary (internal/store,
// itself checked against the CHECK constraints) exactly.
func TestPublicNamesMatchTheStore(t *testing.T) {
	t.Parallel()
	same := func(what string, public []string, internal []string) {
		t.Helper()
		if strings.Join(public, ",") != strings.Join(internal, ",") {
			t.Errorf("%s: public %v, store %v", what, public, internal)
		}
	}
	same("states", strs(ffd.StateBlocked, ffd.StatePending, ffd.StateRunning, ffd.StateCompleted, ffd.StateFailed, ffd.StateCancelled, ffd.StateSkipped, ffd.StateExpired), strs(ffdtype.States...))
	same("flow states", strs(ffd.FlowOpen, ffd.FlowCompleted, ffd.FlowFailed, ffd.FlowCancelled), strs(ffdtype.FlowStates...))
	same("policies", strs(ffd.AllOf, ffd.AnyOf, ffd.Quorum), strs(ffdtype.PolicyKinds...))
	same("on_satisfied", strs(ffd.CancelRemaining, ffd.LetRun), strs(ffdtype.OnSatisfieds...))
	same("decisions", strs(ffd.DecisionPending, ffd.DecisionSatisfied, ffd.DecisionImpossible), strs(ffdtype.Decisions...))
	same("cancel policies", strs(ffd.CancelFlowOnly, ffd.CancelAll, ffd.CancelPending), strs(ffdtype.CancelPolicies...))
	same("streams", strs(ffd.StreamCompletion, ffd.StreamLease, ffd.StreamAll), strs(ffdtype.OutboxStreams...))
	same("missed-tick policies", strs(ffd.MissedLatest, ffd.MissedSkip, ffd.MissedAll), []string{schedule.MissedLatest, schedule.MissedSkip, schedule.MissedAll})
}

func strs[S ~string](xs ...S) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = string(x)
	}
	return out
}

// The public WAL stream hands the handler public events, converted from
// the decoder's, with the session guard it was given; DropWALSlot removes
// the slot.
func TestStreamWALDeliversPublicEvents(t *testing.T) {
	t.Parallel()
	f := setup(t)
	slot := "s_" + strings.ToLower(f.DB.Name)
	ctx, stop := context.WithCancel(f.Ctx)
	started, got, done := make(chan struct{}), make(chan []ffd.OutboxEvent, 16), make(chan error, 1)
	guard := ffd.DefaultSessionConfig()
	go func() {
		done <- ffd.StreamWAL(ctx, ffd.WALConfig{ConnString: f.DB.URL, Slot: slot, Session: &guard,
			OnStart: func() { close(started) },
			Handler: func(_ context.Context, ev []ffd.OutboxEvent) error { got <- ev; return nil }})
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("the stream ended before starting: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the stream never started")
	}
	sub, err := f.client.SubmitFlow(f.Ctx, ffd.SubmitFlowParams{Nodes: []ffd.SubmitNode{{Ref: "audit", Params: ffd.CreateParams{Lane: "wal"}}}})
	if err != nil {
		t.Fatal(err)
	}
	x := sub.Executions["audit"]
	if _, err := f.client.Cancel(f.Ctx, x.ID, "", ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(time.Minute)
	for found := false; !found; {
		select {
		case ev := <-got:
			for _, e := range ev {
				found = found || e.Stream == ffd.StreamCompletion && e.ExecutionID == x.ID.String() && e.Outcome == "cancelled" && e.Step == "audit"
			}
		case <-deadline:
			t.Fatal("the cancellation's completion event, with its step, never came through the WAL stream")
		}
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("StreamWAL after its context ended: %v", err)
	}
	if err := ffd.DropWALSlot(f.Ctx, f.DB.URL, slot); err != nil {
		t.Fatalf("drop the slot: %v", err)
	}
}

// The embedded daemon's documented defaults are the daemon's own.
func TestDaemonDefaultsAreTheDaemons(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		public, daemon any
	}{
		{"cascade workers", ffd.DefaultDaemonCascadeWorkers, daemon.DefaultCascadeWorkers},
		{"sweep interval", ffd.DefaultDaemonSweepInterval, daemon.DefaultSweepInterval},
		{"stop timeout", ffd.DefaultDaemonStopTimeout, daemon.DefaultStopTimeout},
		{"outbox retention", ffd.DefaultOutboxRetention, outbox.DefaultRetention},
		{"execution retention", ffd.DefaultExecutionRetention, daemon.DefaultExecutionRetention},
	} {
		if fmt.Sprint(c.public) != fmt.Sprint(c.daemon) {
			t.Errorf("%s: public default %v, daemon's %v", c.name, c.public, c.daemon)
		}
	}
}

// An upstream's result forwarded inside a value that is marshalled again
// stays JSON: it is not re-encoded as a base64 string.
func TestUpstreamResultForwardsAsJSON(t *testing.T) {
	t.Parallel()
	u := ffd.Upstream{Step: "quote", Result: []byte(`{"cents":120}`)}
	out, err := json.Marshal(map[string]any{"best": u.Result})
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != `{"best":{"cents":120}}` {
		t.Fatalf("forwarded result marshalled as %s; want the JSON embedded as it is", out)
	}
	var q struct{ Cents int }
	if err := u.Decode(&q); err != nil || q.Cents != 120 {
		t.Fatalf("Decode: %+v, %v; want 120 cents", q, err)
	}
	if err := (ffd.Upstream{Step: "none"}).Decode(&q); err == nil {
		t.Fatal("Decode of an upstream without a result succeeded")
	}
}
