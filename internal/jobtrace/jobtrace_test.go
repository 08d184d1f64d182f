package jobtrace_test

import (
	"context"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
)

func spanContext(t *testing.T, state string) trace.SpanContext {
	t.Helper()
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ts, err := trace.ParseTraceState(state)
	if err != nil {
		t.Fatal(err)
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts})
}

// A span context goes into headers and comes back whole; the other items
// stay, in the comma form unless a value needs JSON.
func TestHeadersCarryTheSpanContext(t *testing.T) {
	for _, tc := range []struct {
		state, want string
	}{
		{"", "reply-requested,timeout:30,traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"emq=a", "reply-requested,timeout:30,traceparent:00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01,tracestate:emq=a"},
		{"emq=a,other=b", `{"reply-requested":true,"timeout":"30","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":"emq=a,other=b"}`},
	} {
		h, _ := emqp.ParseHeaders("reply-requested,timeout:30")
		sc := spanContext(t, tc.state)
		h = jobtrace.WithSpanContext(h, sc)
		if h.String() != tc.want {
			t.Errorf("tracestate %q: headers %s; want %s", tc.state, h, tc.want)
		}
		back, err := emqp.ParseHeaders(h.String())
		if err != nil {
			t.Fatal(err)
		}
		got := jobtrace.SpanContext(back)
		if !got.IsRemote() || !got.Equal(sc.WithRemote(true)) {
			t.Errorf("tracestate %q: span context back %+v; want %+v", tc.state, got, sc)
		}
		if d, _ := back.Timeout(); d.Seconds() != 30 || !back.ReplyRequested() {
			t.Errorf("tracestate %q: the other headers changed: %s", tc.state, back)
		}
	}
}

// Without a valid span context nothing is added; a malformed traceparent
// is no trace at all, and the job goes on with it as a header.
func TestNoOrBadTraceparent(t *testing.T) {
	h, _ := emqp.ParseHeaders("reply-requested")
	if got := jobtrace.Inject(context.Background(), h); got != h {
		t.Errorf("Inject without a span: %s", got)
	}
	if got := jobtrace.WithSpanContext(h, trace.SpanContext{}); got != h {
		t.Errorf("WithSpanContext of an invalid one: %s", got)
	}
	for _, bad := range []string{"", "junk", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", strings.Repeat("0", 300)} {
		h := emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTraceparent, Value: bad})
		if sc := jobtrace.SpanContext(h); sc.IsValid() {
			t.Errorf("traceparent %q read as %+v", bad, sc)
		}
		if ctx := jobtrace.Extract(context.Background(), h); trace.SpanContextFromContext(ctx).IsValid() {
			t.Errorf("traceparent %q extracted", bad)
		}
	}
}

// Log lines get trace_id and span_id of a valid span context only.
func TestLogAttrs(t *testing.T) {
	if got := jobtrace.LogAttrs(trace.SpanContext{}); got != nil {
		t.Errorf("LogAttrs of no span: %v", got)
	}
	got := jobtrace.LogAttrs(spanContext(t, ""))
	if len(got) != 2 || !strings.Contains(got[0].(interface{ String() string }).String(), "4bf92f3577b34da6a3ce929d0e0e4736") {
		t.Errorf("LogAttrs: %v", got)
	}
}

// headerCarrier is a traceparent and a tracestate for OpenTelemetry's
// own W3C propagator.
type headerCarrier map[string]string

func (c headerCarrier) Get(key string) string { return c[key] }
func (c headerCarrier) Set(key, value string) { c[key] = value }
func (c headerCarrier) Keys() []string        { return []string{"traceparent", "tracestate"} }

// SpanContext reads what OpenTelemetry's W3C propagator reads, and a span
// context written to headers reads back the same.
func FuzzSpanContext(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "a=b,c=d")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03-more", "")
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-", "")
	f.Add("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	f.Add("", "")
	f.Fuzz(func(t *testing.T, tp, ts string) {
		h := emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTraceparent, Value: tp}, emqp.Header{Name: emqp.HeaderTracestate, Value: ts})
		sc := jobtrace.SpanContext(h)
		// The headers keep a value as sent but for outer spaces, which
		// the comma form cannot hold: the propagator reads what they hold.
		tp, _ = h.Get(emqp.HeaderTraceparent)
		ts, _ = h.Get(emqp.HeaderTracestate)
		want := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), headerCarrier{"traceparent": tp, "tracestate": ts}))
		if !sc.Equal(want) {
			t.Fatalf("traceparent %q tracestate %q: %+v; OpenTelemetry's propagator reads %+v", tp, ts, sc, want)
		}
		if !sc.IsValid() {
			return
		}
		again := jobtrace.SpanContext(jobtrace.WithSpanContext(emqp.Headers{}, sc))
		if !again.Equal(sc) {
			t.Fatalf("span context %+v written and read back as %+v", sc, again)
		}
	})
}
