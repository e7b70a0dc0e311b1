package ffd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/flowfabric/ffd"
)

// versionLog records which worker version ran each step of each flow.
type versionLog struct {
	mu  sync.Mutex
	ran map[uuid.UUID]map[string]string // flow → step → the version of the worker that ran it
}

func (l *versionLog) worker(f *fixture, version string) *ffd.Worker {
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "step", func(ctx context.Context, job *ffd.Job) ([]byte, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.ran[*job.FlowID] == nil {
			l.ran[*job.FlowID] = map[string]string{}
		}
		l.ran[*job.FlowID][job.Step] = version
		return nil, nil
	})
	cfg := ffd.WorkerConfig{Lanes: []string{"v"}, Kinds: kinds, Concurrency: 4, PollInterval: 20 * time.Millisecond, ID: version}
	if version != "" {
		cfg.Versions = []string{version}
	}
	return f.startWorker(cfg)
}

// chain is a three-step flow under version.
func chain(version string) ffd.SubmitFlowParams {
	p := ffd.SubmitFlowParams{Flow: ffd.CreateFlowParams{Version: version}}
	for i := range 3 {
		p.Nodes = append(p.Nodes, ffd.SubmitNode{Ref: fmt.Sprint("s", i), Params: ffd.CreateParams{Lane: "v", Kind: "step"}})
		if i > 0 {
			p.Edges = append(p.Edges, ffd.SubmitEdge{From: fmt.Sprint("s", i-1), To: fmt.Sprint("s", i)})
		}
	}
	return p
}

// Two worker versions side by side: the flows started under v1 before
// the v2 workers came finish on v1 while new flows run on v2; an
// unversioned flow runs on either.
func TestVersionsSideBySide(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.startDaemon()
	log := &versionLog{ran: map[uuid.UUID]map[string]string{}}
	log.worker(f, "v1")
	var old, fresh []uuid.UUID
	for range 5 {
		sub, err := f.client.SubmitFlow(f.Ctx, chain("v1"))
		if err != nil {
			t.Fatal(err)
		}
		if x := sub.Executions["s0"]; x.Version != "v1" {
			t.Fatalf("a member of a v1 flow has version %q; want v1", x.Version)
		}
		old = append(old, sub.Flow.ID)
	}
	if _, err := f.client.SubmitFlow(f.Ctx, chain("v2")); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("a flow of a version nobody announced: %v; want a validation error", err)
	}
	log.worker(f, "v2")
	for range 5 {
		sub, err := f.client.SubmitFlow(f.Ctx, chain("v2"))
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, sub.Flow.ID)
	}
	for _, id := range append(old, fresh...) {
		if out, err := f.client.WaitFlow(f.Ctx, id); err != nil || out.Flow.State != ffd.FlowCompleted {
			t.Fatalf("flow %s: %v, %v; want completed", id, out, err)
		}
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for want, ids := range map[string][]uuid.UUID{"v1": old, "v2": fresh} {
		for _, id := range ids {
			for step, got := range log.ran[id] {
				if got != want {
					t.Fatalf("step %s of a %s flow ran on a %s worker", step, want, got)
				}
			}
			if len(log.ran[id]) != 3 {
				t.Fatalf("flow %s ran %d steps; want 3", id, len(log.ran[id]))
			}
		}
	}
	vs, err := f.client.ListVersions(f.Ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0].Version != "v2" || vs[0].LiveFlows != 0 {
		t.Fatalf("versions %+v; want v2 then v1, nothing live", vs)
	}
	f.checkInvariants()
}

// An unversioned worker never claims versioned work; a versioned one
// claims unversioned work too. Bad versions are typed and write nothing.
func TestVersionsRefuseAndFence(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "v", Version: "v9"}); !isKind(err, ffd.KindUnknownVersion) {
		t.Fatalf("an execution of an unknown version: %v; want kind unknown_version", err)
	}
	if _, err := f.client.SubmitFlow(f.Ctx, chain("v9")); !isKind(err, ffd.KindUnknownVersion) {
		t.Fatalf("a flow of an unknown version: %v; want kind unknown_version", err)
	}
	if _, err := f.client.CreateFlow(f.Ctx, ffd.CreateFlowParams{Version: "v9"}); !isKind(err, ffd.KindUnknownVersion) {
		t.Fatalf("an empty flow of an unknown version: %v; want kind unknown_version", err)
	}
	if _, err := f.client.CreateFlow(f.Ctx, ffd.CreateFlowParams{OnFailure: &ffd.CreateParams{Lane: "v"}}); !errors.Is(err, ffd.ErrValidation) {
		t.Fatalf("CreateFlow with an on-failure step: %v; want a validation error (AddCompensation adds one)", err)
	}
	for _, tt := range []struct {
		name string
		p    ffd.CreateParams
	}{
		{"a bad version name", ffd.CreateParams{Lane: "v", Version: "v 1"}},
		{"a version capability given outright", ffd.CreateParams{Lane: "v", RequiredCapabilities: []string{"ffd.version:v1"}}},
	} {
		if _, err := f.client.Create(f.Ctx, tt.p); !errors.Is(err, ffd.ErrValidation) {
			t.Errorf("%s: %v; want a validation error", tt.name, err)
		}
	}
	if _, err := ffd.NewWorker(f.client, ffd.WorkerConfig{Lanes: []string{ffd.SubflowLane}, Handler: func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil }}); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("a worker of the sub-flow lane: %v; want a validation error", err)
	}
	var n int
	if err := f.Pool.QueryRow(f.Ctx, `SELECT (SELECT count(*) FROM ff_execution) + (SELECT count(*) FROM ff_flow)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused creates wrote %d rows (%v); want none", n, err)
	}
	if err := f.client.AnnounceVersions(f.Ctx, "v1"); err != nil {
		t.Fatal(err)
	}
	fl, err := f.client.SubmitFlow(f.Ctx, chain("v1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.CreateInFlow(f.Ctx, fl.Flow.ID, ffd.CreateParams{Lane: "v", Step: "other", Version: "v0"}); !errors.Is(err, ffd.ErrValidation) {
		t.Errorf("a member of another version: %v; want a validation error", err)
	}
	solo, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "v", Kind: "step"})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "v", Worker: "plain", Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) != 1 || plain[0].ID != solo.Execution.ID {
		t.Fatalf("an unversioned claim took %d executions; want only the unversioned one", len(plain))
	}
	versioned, err := f.client.Claim(f.Ctx, ffd.ClaimParams{Lane: "v", Worker: "new", Max: 10, Capabilities: []string{"ffd.version:v1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(versioned) != 1 || versioned[0].Version != "v1" {
		t.Fatalf("a v1 claim took %+v; want the v1 flow's root", versioned)
	}
}

func isKind(err error, kind ffd.ValidationKind) bool {
	var ve *ffd.ValidationError
	return errors.As(err, &ve) && ve.Kind == kind
}

// A worker that starts while its versions cannot be announced (here the
// versions' table is held, so the announcement's lock wait times out, as
// a statement does while a node of the cluster is away) starts all the
// same, claims its version's work, and announces once it can.
func TestWorkerAnnouncesAfterAnOutage(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.client.AnnounceVersions(f.Ctx, "v9"); err != nil {
		t.Fatal(err)
	}
	x := f.mustCreate(ffd.CreateParams{Lane: "announce", Version: "v9"})
	var before time.Time
	if err := f.Pool.QueryRow(f.Ctx, `SELECT last_seen_at FROM ff_version WHERE version = 'v9'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	// Unknown URL parameters are session settings to pgx.
	sep := "?"
	if strings.Contains(f.DB.URL, "?") {
		sep = "&"
	}
	client := budgetClient(t, budgetPool(t, f.Ctx, f.DB.URL+sep+"lock_timeout=100ms", nil, 4))
	hold, err := f.Pool.Begin(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Rollback(context.Background())
	if _, err := hold.Exec(f.Ctx, `LOCK TABLE ff_version IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	w, err := ffd.NewWorker(client, ffd.WorkerConfig{Lanes: []string{"announce"}, Versions: []string{"v9"}, PollInterval: 20 * time.Millisecond,
		Handler: func(context.Context, *ffd.Job) ([]byte, error) { ran <- struct{}{}; return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.Ctx); err != nil {
		t.Fatalf("start while the versions could not be announced: %v; want it started", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Stop(ctx)
	}()
	select {
	case <-ran:
	case <-f.Ctx.Done():
		t.Fatalf("%s not run within the test's budget while the announcement waited", x.ID)
	}
	if err := hold.Rollback(f.Ctx); err != nil {
		t.Fatal(err)
	}
	for {
		var after time.Time
		if err := f.Pool.QueryRow(f.Ctx, `SELECT last_seen_at FROM ff_version WHERE version = 'v9'`).Scan(&after); err != nil {
			t.Fatalf("waiting for the worker's announcement within the test's budget: %v", err)
		}
		if after.After(before) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
