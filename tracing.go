package ffd

import (
	"context"

	"github.com/flowfabric/ffd/ffdtype"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// TraceTag is the tag under which an execution carries the trace context
// of the code that enqueued it (W3C traceparent and tracestate), when the
// client traces (Config.TracerProvider).
const TraceTag = "ffd_trace"

// tracing is a client's OpenTelemetry hooks; the zero value is off and
// costs nothing.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TraceContext
}

func newTracing(tp trace.TracerProvider) tracing {
	if tp == nil {
		return tracing{}
	}
	return tracing{tracer: tp.Tracer("github.com/flowfabric/ffd")}
}

// inject records ctx's span context in p's tags, so that the handler's
// span continues the trace that enqueued the execution.
func (t tracing) inject(ctx context.Context, p *ffdtype.CreateParams) {
	if t.tracer == nil || !trace.SpanContextFromContext(ctx).IsValid() {
		return
	}
	carrier := propagation.MapCarrier{}
	t.prop.Inject(ctx, carrier)
	tags := make(map[string]any, len(p.Tags)+1)
	for k, v := range p.Tags {
		tags[k] = v
	}
	tc := make(map[string]any, len(carrier))
	for k, v := range carrier {
		tc[k] = v
	}
	tags[TraceTag] = tc
	p.Tags = tags
}

// span is a handler's span; the zero value does nothing.
type span struct{ s trace.Span }

// start begins the span of one handler run, a child of the span that
// enqueued the execution when it carries one (so a flow's steps share the
// trace of the code that submitted the flow), with the execution's
// identity as attributes.
func (t tracing) start(ctx context.Context, x *Execution) (context.Context, span) {
	if t.tracer == nil {
		return ctx, span{}
	}
	if tc, ok := x.Tags[TraceTag].(map[string]any); ok {
		carrier := propagation.MapCarrier{}
		for k, v := range tc {
			if s, ok := v.(string); ok {
				carrier[k] = s
			}
		}
		ctx = t.prop.Extract(ctx, carrier)
	}
	attrs := []attribute.KeyValue{
		attribute.String("ffd.execution_id", x.ID.String()),
		attribute.String("ffd.lane", x.Lane),
		attribute.String("ffd.kind", x.Kind),
		attribute.Int("ffd.attempt", x.Attempt),
	}
	if x.FlowID != nil {
		attrs = append(attrs, attribute.String("ffd.flow_id", x.FlowID.String()), attribute.String("ffd.step", x.Step))
	}
	name := "ffd.handle"
	if x.Kind != "" {
		name += " " + x.Kind
	}
	ctx, s := t.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, span{s: s}
}

// end closes the span with the run's outcome.
func (s span) end(outcome string, err error) {
	if s.s == nil {
		return
	}
	s.s.SetAttributes(attribute.String("ffd.outcome", outcome))
	if err != nil {
		s.s.RecordError(err)
		s.s.SetStatus(codes.Error, err.Error())
	}
	s.s.End()
}
