package client

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
)

type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// BenchmarkPublishSpan is what tracing adds to a Send: off (OpenTelemetry's
// global provider with no SDK set, the default), an SDK that samples
// nothing, and one that samples every job (spans dropped, not exported).
//
//	go test -run '^$' -bench PublishSpan ./client/
func BenchmarkPublishSpan(b *testing.B) {
	for _, c := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil}, // OpenTelemetry's global provider, no SDK set
		{"unsampled", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.NeverSample()), sdktrace.WithSpanProcessor(dropSpans{}))},
		{"sampled", sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropSpans{}))},
	} {
		b.Run(c.name, func(b *testing.B) {
			tp := c.tp
			if tp == nil {
				tp = otel.GetTracerProvider()
			}
			cl := &Client{opts: Options{TracerProvider: c.tp}, tracer: tp.Tracer(jobtrace.ScopeName)}
			h, _ := emqp.ParseHeaders("timeout:30")
			b.ReportAllocs()
			for b.Loop() {
				o := sendOptions{headers: h, queue: "q", msgid: "01a234cc-504e-75b9-a94e-0b9d7424fccf", size: 100}
				cl.publishSpan(context.Background(), &o)
				o.endSpan(nil)
			}
		})
	}
}
