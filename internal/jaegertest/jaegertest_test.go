package jaegertest_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	"github.com/eventmq/emq/internal/jaegertest"
)

// A span sent over OTLP gRPC comes back through the query API, with its
// service and parent.
func TestJaegerSpanRoundTrip(t *testing.T) {
	t.Parallel()
	j := jaegertest.Start(t, "")
	exp, err := otlptracegrpc.New(context.Background(), otlptracegrpc.WithEndpoint(j.OTLPGRPC), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("probe"))))
	defer tp.Shutdown(context.Background())
	ctx, parent := tp.Tracer("t").Start(context.Background(), "parent")
	_, child := tp.Tracer("t").Start(ctx, "child")
	child.End()
	parent.End()
	spans := j.WaitTrace(t, parent.SpanContext().TraceID().String(), func(s []jaegertest.Span) bool { return len(s) == 2 })
	for _, s := range spans {
		if s.Service != "probe" {
			t.Errorf("span %s of service %q", s.OperationName, s.Service)
		}
		if s.OperationName == "child" && s.Parent() != parent.SpanContext().SpanID().String() {
			t.Errorf("child's parent %q; want %s", s.Parent(), parent.SpanContext().SpanID())
		}
	}
}
