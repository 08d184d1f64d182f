package broker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/jobtrace"
)

// A job's spans in the broker, with Options.TracerProvider set (the
// package doc's Tracing says what each covers):
//
//	receive Q   REQUEST read ──▶ journaled, ACKed          (server)
//	wait Q      pending (or delayed) ──▶ given to a worker (internal)
//	dispatch Q  given to a worker ──▶ REPLY, FAIL, lost    (producer; a link to the attempt before)
//
// Each is a child of the span the job's traceparent names (the client's
// publish span), or, for a job that came without one, of its receive
// span, which starts a trace. A wait span is made when it ends, with the
// time it began; nothing is open while a job waits, so a backlog holds
// no spans, only a jobTrace (about 100 bytes) per sampled job.

// tracing is the loop's record of the traced jobs. A nil *tracing is
// tracing off: every method returns at once.
type tracing struct {
	tracer trace.Tracer
	jobs   map[*job]*jobTrace
}

// jobTrace is what the loop keeps of a sampled job's trace.
type jobTrace struct {
	parent trace.SpanContext // its spans' parent
	span   trace.Span        // receive while journaling, dispatch while in flight; else nil
	since  time.Time         // pending (or delayed) since; zero = not known (replayed)
	prev   trace.SpanContext // the last attempt's dispatch span
}

func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(jobtrace.ScopeName), jobs: make(map[*job]*jobTrace)}
}

// start makes a span of j under its parent, from at.
func (t *tracing) start(j *job, parent trace.SpanContext, op string, kind trace.SpanKind, at time.Time, opts ...trace.SpanStartOption) trace.Span {
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	opts = append(opts, trace.WithSpanKind(kind), trace.WithTimestamp(at))
	_, span := t.tracer.Start(ctx, jobtrace.SpanName(op, j.q.name), opts...)
	if span.IsRecording() {
		span.SetAttributes(jobtrace.Attrs(op, j.q.name, j.id)...)
	}
	return span
}

// received starts the receive span of a new job's REQUEST.
func (t *tracing) received(j *job, at time.Time) {
	if t == nil {
		return
	}
	parent := jobtrace.SpanContext(j.headers)
	span := t.start(j, parent, jobtrace.OpReceive, trace.SpanKindServer, at)
	if !span.IsRecording() {
		return
	}
	if !parent.IsValid() {
		parent = span.SpanContext()
	}
	t.jobs[j] = &jobTrace{parent: parent, span: span}
}

// refused ends the receive span of a job that was not stored.
func (t *tracing) refused(j *job, code, text string) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil && jt.span != nil {
		jt.span.SetStatus(codes.Error, code+": "+text)
	}
}

// record returns j's trace, made for a job that has none yet (replayed,
// revived) when the sampler takes it; nil otherwise.
func (t *tracing) record(j *job) *jobTrace {
	if jt := t.jobs[j]; jt != nil {
		return jt
	}
	parent := jobtrace.SpanContext(j.headers)
	if !parent.IsValid() || !parent.IsSampled() {
		return nil // a new trace would start at the dispatch span: made there
	}
	jt := &jobTrace{parent: parent}
	t.jobs[j] = jt
	return jt
}

// event follows j's life: it is called with each of j's events
// (emitJob).
func (t *tracing) event(kind string, j *job, reason string) {
	if t == nil {
		return
	}
	now := time.Now()
	if kind == EventDispatched {
		t.dispatched(j, now)
		return
	}
	jt := t.jobs[j]
	if jt == nil {
		return
	}
	switch kind {
	case EventAcked:
		if jt.span != nil {
			jt.span.End(trace.WithTimestamp(now))
			jt.span, jt.since = nil, now
		}
	case EventReplied:
		t.end(jt, "replied", "", now)
	case EventFailed, EventTimedOut, EventWorkerLost:
		if jt.span != nil {
			jt.span.AddEvent(kind, eventReason(reason))
			jt.span.SetStatus(codes.Error, kind+": "+reason)
		}
	case EventRetry, EventRequeued:
		t.end(jt, kind, reason, now)
		jt.since = now
	case EventBuried:
		t.end(jt, "dead-lettered", reason, now)
	case EventCancelled, EventRemoved:
		if jt.span == nil && !jt.since.IsZero() { // it waited: the wait ends here
			span := t.start(j, jt.parent, jobtrace.OpWait, trace.SpanKindInternal, jt.since)
			jt.span = span
		}
		t.end(jt, kind, reason, now)
	}
}

// dispatched ends j's wait and starts its delivery.
func (t *tracing) dispatched(j *job, now time.Time) {
	jt := t.record(j)
	parent := trace.SpanContext{}
	if jt != nil {
		parent = jt.parent
		if !jt.since.IsZero() {
			t.start(j, parent, jobtrace.OpWait, trace.SpanKindInternal, jt.since).End(trace.WithTimestamp(now))
		}
	} else if parent = jobtrace.SpanContext(j.headers); parent.IsValid() && !parent.IsSampled() {
		return // its sender's trace is not sampled
	}
	var opts []trace.SpanStartOption
	if jt != nil && jt.prev.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: jt.prev}))
	}
	span := t.start(j, parent, jobtrace.OpDispatch, trace.SpanKindProducer, now, opts...)
	if !span.IsRecording() {
		return
	}
	span.SetAttributes(jobtrace.Attempt(int(j.attempts) + 1))
	if jt == nil {
		jt = &jobTrace{parent: span.SpanContext()} // a trace that starts here
		t.jobs[j] = jt
	}
	jt.span, jt.since = span, time.Time{}
}

// forwarded returns the headers j goes to its worker with: traceparent
// names the delivery's span, so the worker's span is its child.
func (t *tracing) forwarded(j *job, h emqp.Headers) emqp.Headers {
	if t == nil {
		return h
	}
	if jt := t.jobs[j]; jt != nil && jt.span != nil {
		return jobtrace.WithSpanContext(h, jt.span.SpanContext())
	}
	return h
}

// undelivered ends the delivery of a job that never reached its worker
// (its connection closed, or the broker stopped, before it was written).
func (t *tracing) undelivered(j *job) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		t.end(jt, "not delivered", "", time.Now())
		jt.since = time.Now()
	}
}

// end ends jt's open span, if any, with an event saying why.
func (t *tracing) end(jt *jobTrace, what, reason string, now time.Time) {
	if jt.span == nil {
		return
	}
	jt.span.AddEvent(what, eventReason(reason), trace.WithTimestamp(now))
	jt.prev = jt.span.SpanContext()
	jt.span.End(trace.WithTimestamp(now))
	jt.span = nil
}

// forget drops j's trace; a span still open (a REQUEST not stored) ends.
func (t *tracing) forget(j *job) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		if jt.span != nil {
			jt.span.End()
		}
		delete(t.jobs, j)
	}
}

// reasonKey is the attribute of a span event's reason.
const reasonKey = attribute.Key("emq.reason")

func eventReason(reason string) trace.EventOption {
	if reason == "" {
		return trace.WithAttributes()
	}
	return trace.WithAttributes(reasonKey.String(reason))
}

// logAttrs are the trace_id and span_id of a log line about j: its
// current span in the broker, else the span its traceparent names.
func (t *tracing) logAttrs(j *job) []any {
	if t != nil {
		if jt := t.jobs[j]; jt != nil && jt.span != nil {
			return jobtrace.LogAttrs(jt.span.SpanContext())
		}
	}
	return jobtrace.LogAttrs(jobtrace.SpanContext(j.headers))
}
