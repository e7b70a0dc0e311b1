package ffd_test

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap"

	"github.com/flowfabric/ffd"
)

// Worker metrics count handler runs by kind and outcome, claim batches
// and completion commits, and leave nothing in flight; the handler the
// application mounts serves them.
func TestWorkerMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t)
	m, err := ffd.NewWorkerMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	kinds := ffd.NewKinds()
	ffd.HandleBytes(kinds, "ok", func(context.Context, *ffd.Job) ([]byte, error) { return nil, nil })
	ffd.HandleBytes(kinds, "bad", func(context.Context, *ffd.Job) ([]byte, error) { return nil, ffd.Permanent(errors.New("no")) })
	f.startWorker(ffd.WorkerConfig{Lanes: []string{"metered"}, Kinds: kinds, Metrics: m, PollInterval: 50 * time.Millisecond})
	for _, kind := range []string{"ok", "ok", "ok", "bad"} {
		if _, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "metered", Kind: kind}); err != nil {
			t.Fatal(err)
		}
	}
	f.WaitFor("every execution to end", func() bool {
		return f.Count(`SELECT count(*) FROM ff_execution WHERE lane = 'metered' AND terminal_at IS NOT NULL`) == 4
	})
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	var text string
	f.WaitFor("the metrics to count every run", func() bool {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		text = string(b)
		return strings.Contains(text, `ffd_worker_handler_seconds_count{kind="ok",outcome="completed"} 3`) &&
			strings.Contains(text, `ffd_worker_handler_seconds_count{kind="bad",outcome="failed"} 1`)
	})
	for _, want := range []string{`ffd_worker_in_flight{lane="metered"} 0`, "ffd_worker_claim_batch_size_count", "ffd_worker_completion_batch_seconds_count",
		`ffd_worker_executions_total{lane="metered",outcome="completed"} 3`, `ffd_worker_executions_total{lane="metered",outcome="failed"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

// With a TracerProvider, a handler's span continues the trace of the code
// that enqueued its execution, and a flow's steps share the trace of the
// submission, each naming its flow and step; without one, nothing is
// stored.
func TestTracing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	client, err := ffd.NewClient(f.Pool, &ffd.Config{Logger: zap.NewNop(), TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	f.startDaemon()
	f.startNoop(client, "traced")

	ctx, parent := tp.Tracer("test").Start(f.Ctx, "signup")
	if _, err := client.Create(ctx, ffd.CreateParams{Lane: "traced", Kind: "mail"}); err != nil {
		t.Fatal(err)
	}
	sub, err := client.SubmitFlow(ctx, ffd.SubmitFlowParams{
		Nodes: []ffd.SubmitNode{{Ref: "a", Params: ffd.CreateParams{Lane: "traced", Kind: "step"}}, {Ref: "b", Params: ffd.CreateParams{Lane: "traced", Kind: "step"}}},
		Edges: []ffd.SubmitEdge{{From: "a", To: "b"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	f.WaitFor("three handler spans", func() bool { return len(rec.Ended()) >= 4 })
	steps := map[string]bool{}
	for _, s := range rec.Ended() {
		if !strings.HasPrefix(s.Name(), "ffd.handle") {
			continue
		}
		if s.SpanContext().TraceID() != parent.SpanContext().TraceID() || s.Parent().SpanID() != parent.SpanContext().SpanID() {
			t.Errorf("span %s is not a child of the enqueuing span", s.Name())
		}
		for _, a := range s.Attributes() {
			if a.Key == "ffd.step" {
				steps[a.Value.AsString()] = true
			}
			if a.Key == "ffd.flow_id" && a.Value.AsString() != sub.Flow.ID.String() {
				t.Errorf("span %s names flow %s, want %s", s.Name(), a.Value.AsString(), sub.Flow.ID)
			}
		}
	}
	if !steps["a"] || !steps["b"] {
		t.Fatalf("step spans %v; want a and b", steps)
	}
	plain, err := f.client.Create(f.Ctx, ffd.CreateParams{Lane: "untraced"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := plain.Execution.Tags[ffd.TraceTag]; ok {
		t.Fatal("a client without a TracerProvider stored a trace context")
	}
}
