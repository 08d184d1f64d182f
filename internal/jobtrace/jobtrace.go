// Package jobtrace carries a job's trace in its headers and names the
// spans of its life in OpenTelemetry's terms, for the client, the broker
// and the worker alike.
//
// The trace context travels as W3C Trace Context: the headers
// traceparent and tracestate of the REQUEST (emqp.HeaderTraceparent,
// emqp.HeaderTracestate). They are headers like any other: stored with
// the job, shown by the admin tools, passed on to the worker, and passed
// through untouched by peers that do not know them (original EventMQ job
// managers). A tracestate with several members holds commas, so headers
// that carry one are sent in the JSON form (emqp.Headers).
//
// Spans follow OpenTelemetry's semantic conventions for messaging
// (messaging.system=emq, messaging.operation.name publish, receive,
// dispatch, process); see Attrs. This package only uses the OpenTelemetry
// API: an SDK, with its exporter and sampler, is the program's choice
// (internal/otelenv for EMQ's commands).
package jobtrace

import (
	"context"
	"encoding/hex"
	"log/slog"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
)

// ScopeName is the instrumentation scope of EMQ's spans.
const ScopeName = "github.com/eventmq/emq"

// Operation names (messaging.operation.name) of EMQ's spans.
const (
	OpPublish  = "publish"  // client: a REQUEST sent, until its ACK
	OpReceive  = "receive"  // broker: a REQUEST received, until it is journaled and ACKed
	OpWait     = "wait"     // broker: the job waits in its queue (or for its retry)
	OpDispatch = "dispatch" // broker: one delivery to a worker, until its REPLY, FAIL or loss
	OpProcess  = "process"  // worker: the handler's run
)

// System is messaging.system.
var System = semconv.MessagingSystemKey.String("emq")

// Inject returns h with the trace context of ctx's span in it
// (traceparent, and tracestate when there is one). Without a valid span
// context in ctx, h comes back unchanged.
func Inject(ctx context.Context, h emqp.Headers) emqp.Headers {
	return WithSpanContext(h, trace.SpanContextFromContext(ctx))
}

// WithSpanContext returns h whose traceparent (and tracestate) name sc,
// a tracestate of h dropped when sc has none; h unchanged when sc is not
// valid.
func WithSpanContext(h emqp.Headers, sc trace.SpanContext) emqp.Headers {
	if !sc.IsValid() {
		return h
	}
	h = h.Set(emqp.HeaderTraceparent, Traceparent(sc))
	if ts := sc.TraceState().String(); ts != "" {
		return h.Set(emqp.HeaderTracestate, ts)
	}
	return h.Del(emqp.HeaderTracestate)
}

// Traceparent is sc in W3C's traceparent form, version 00.
func Traceparent(sc trace.SpanContext) string {
	var b [55]byte
	copy(b[:], "00-")
	tid, sid, flags := sc.TraceID(), sc.SpanID(), sc.TraceFlags()
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(flags)})
	return string(b[:])
}

// SpanContext returns the remote span context that h's traceparent and
// tracestate name; not valid when h has none, or a malformed one.
func SpanContext(h emqp.Headers) trace.SpanContext {
	tp, ok := h.Get(emqp.HeaderTraceparent)
	if !ok {
		return trace.SpanContext{}
	}
	var cfg trace.SpanContextConfig
	if !parseTraceparent(tp, &cfg) {
		return trace.SpanContext{}
	}
	// A tracestate that does not parse is dropped; the traceparent
	// stands (W3C Trace Context, 3.3.1).
	ts, _ := h.Get(emqp.HeaderTracestate)
	cfg.TraceState, _ = trace.ParseTraceState(ts)
	cfg.Remote = true
	sc := trace.NewSpanContext(cfg)
	if !sc.IsValid() {
		return trace.SpanContext{}
	}
	return sc
}

// parseTraceparent reads a traceparent as OpenTelemetry's W3C propagator
// does (its package imports net/http, which the broker keeps out of its
// room; a fuzz test holds the two to the same answers): version, trace
// id, span id and flags in lower-case hex, version ff refused, and
// nothing after the flags in version 00.
func parseTraceparent(s string, cfg *trace.SpanContextConfig) bool {
	var version, flags [1]byte
	if !hexPart(version[:], &s) || version[0] == 0xff ||
		!hexPart(cfg.TraceID[:], &s) || !hexPart(cfg.SpanID[:], &s) || !hexPart(flags[:], &s) {
		return false
	}
	if version[0] == 0 && (s != "" || flags[0] > 3) {
		return false
	}
	cfg.TraceFlags = trace.TraceFlags(flags[0]) & (trace.FlagsSampled | trace.FlagsRandom)
	return true
}

// hexPart decodes the lower-case hex before the next "-" of s into dst,
// exactly len(dst) bytes, and leaves s after the "-".
func hexPart(dst []byte, s *string) bool {
	part, rest, _ := strings.Cut(*s, "-")
	*s = rest
	if len(part) != 2*len(dst) || strings.ContainsAny(part, "ABCDEF") {
		return false
	}
	_, err := hex.Decode(dst, []byte(part))
	return err == nil
}

// Extract returns ctx with the remote span context of h, or ctx as it is
// when h has none.
func Extract(ctx context.Context, h emqp.Headers) context.Context {
	sc := SpanContext(h)
	if !sc.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, sc)
}

// Attrs are the attributes every span of a job has.
func Attrs(op, queue, msgid string) []attribute.KeyValue {
	return AppendAttrs(make([]attribute.KeyValue, 0, 6), op, queue, msgid)
}

// AppendAttrs is Attrs appended to dst: a caller that sets them on one
// span after another reuses one slice (a span copies what it is given).
func AppendAttrs(dst []attribute.KeyValue, op, queue, msgid string) []attribute.KeyValue {
	return append(dst,
		System,
		semconv.MessagingOperationName(op),
		operationType(op),
		semconv.MessagingDestinationName(queue),
		semconv.MessagingMessageID(msgid),
	)
}

func operationType(op string) attribute.KeyValue {
	switch op {
	case OpPublish, OpDispatch:
		return semconv.MessagingOperationTypeSend
	case OpReceive:
		return semconv.MessagingOperationTypeReceive
	case OpWait:
		return semconv.MessagingOperationTypeKey.String("wait")
	}
	return semconv.MessagingOperationTypeProcess
}

// SpanName is a span's name: the operation and the queue, as the
// conventions have it ("publish email").
func SpanName(op, queue string) string { return op + " " + queue }

// Attempt is the attribute of a delivery's number: 1 the first time.
func Attempt(n int) attribute.KeyValue { return attribute.Int("emq.attempt", n) }

// LogAttrs are the attributes a log line about a job with the span
// context sc carries: trace_id and span_id, or none when sc is not
// valid.
func LogAttrs(sc trace.SpanContext) []any {
	if !sc.IsValid() {
		return nil
	}
	return []any{slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String())}
}
