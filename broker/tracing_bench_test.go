package broker

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/eventmq/emq/emqp"
)

// dropSpans is a span processor that keeps nothing: what a span costs the
// loop without its export.
type dropSpans struct{}

func (dropSpans) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (dropSpans) OnEnd(sdktrace.ReadOnlySpan)                     {}
func (dropSpans) Shutdown(context.Context) error                  { return nil }
func (dropSpans) ForceFlush(context.Context) error                { return nil }

// BenchmarkTracingHooks is what tracing costs the loop for one job's life
// (received, ACKed, dispatched with its headers, replied, forgotten): off
// (no TracerProvider: the REQUEST path with tracing off), a job whose
// sender did not sample it, one sampled by its sender, and one that came
// without a trace (the broker's sampler, always on, starts one). Span
// ends go to the ender goroutine as in a running broker.
//
//	go test -run '^$' -bench TracingHooks ./broker/
func BenchmarkTracingHooks(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(dropSpans{}))
	for _, c := range []struct {
		name    string
		tracing bool
		headers string
	}{
		{"off", false, "traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"unsampled", true, "traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"},
		{"sampled", true, "traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"no-trace", true, ""},
	} {
		b.Run(c.name, func(b *testing.B) {
			var t *tracing
			if c.tracing {
				t = newTracing(tp)
				defer t.run()()
			}
			h, _ := emqp.ParseHeaders(c.headers)
			q := &queue{name: "q"}
			jobs := make([]job, b.N) // made before the clock starts: the hooks alone are timed
			for i := range jobs {
				jobs[i] = job{id: "01a234cc-504e-75b9-a94e-0b9d7424fccf", q: q, headers: h}
			}
			now := time.Now()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				j := &jobs[i]
				t.received(j, now)
				t.event(EventAcked, j, "")
				t.event(EventDispatched, j, "")
				_ = t.forwarded(j, h)
				t.event(EventReplied, j, "")
				t.forget(j)
				if i%16 == 15 {
					t.flush() // a loop turn's end, as the broker does
				}
			}
		})
	}
}
