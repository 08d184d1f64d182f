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
//
// The loop starts the spans whose ids it needs (receive, dispatch) and
// leaves the rest to the ender goroutine: ending a span (a copy of it
// handed to the exporter's batch) and making a wait span cost the loop a
// channel send. When the ender falls behind by endQueue spans, the loop
// ends them itself.

// tracing is the loop's record of the traced jobs. A nil *tracing is
// tracing off: every method returns at once.
type tracing struct {
	tracer trace.Tracer
	jobs   map[*job]*jobTrace
	ends   chan func()   // to the ender; nil while it does not run
	ended  chan struct{} // closed when the ender has stopped
}

// endQueue is how many spans may wait for the ender.
const endQueue = 4096

// run starts the ender; stop ends what waits and stops it. Both run on
// the loop's goroutine (Run's).
func (t *tracing) run() (stop func()) {
	if t == nil {
		return func() {}
	}
	t.ends, t.ended = make(chan func(), endQueue), make(chan struct{})
	go func() {
		defer close(t.ended)
		for end := range t.ends {
			end()
		}
	}()
	return func() {
		close(t.ends)
		<-t.ended
		t.ends = nil
	}
}

// later has the ender run fn, or runs it now when the ender is behind
// or not running.
func (t *tracing) later(fn func()) {
	if t.ends != nil {
		select {
		case t.ends <- fn:
			return
		default:
		}
	}
	fn()
}

// endAt ends span at the time given, later.
func (t *tracing) endAt(span trace.Span, at time.Time) {
	t.later(func() { span.End(trace.WithTimestamp(at)) })
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

// start makes a span of the job msgid of queue under its parent, from
// at.
func (t *tracing) start(queue, msgid string, parent trace.SpanContext, op string, kind trace.SpanKind, at time.Time, opts ...trace.SpanStartOption) trace.Span {
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	opts = append(opts, trace.WithSpanKind(kind), trace.WithTimestamp(at))
	_, span := t.tracer.Start(ctx, jobtrace.SpanName(op, queue), opts...)
	if span.IsRecording() {
		span.SetAttributes(jobtrace.Attrs(op, queue, msgid)...)
	}
	return span
}

// waited makes j's wait span, from since to now, later; reason, if not
// "", is why it ended other than by a dispatch.
func (t *tracing) waited(j *job, parent trace.SpanContext, since, now time.Time, reason string) {
	queue, msgid := j.q.name, j.id
	t.later(func() {
		span := t.start(queue, msgid, parent, jobtrace.OpWait, trace.SpanKindInternal, since)
		if reason != "" {
			span.AddEvent(reason, trace.WithTimestamp(now))
		}
		span.End(trace.WithTimestamp(now))
	})
}

// A job whose traceparent says "not sampled" makes no span in the broker,
// whatever the broker's sampler: the sender's decision holds for the
// whole trace, as OpenTelemetry's parent-based samplers (the default)
// have it, and a job that is not traced costs the loop one read of its
// headers. The broker's sampler decides for jobs that come without a
// trace.

// received starts the receive span of a new job's REQUEST.
func (t *tracing) received(j *job, at time.Time) {
	if t == nil {
		return
	}
	parent := jobtrace.SpanContext(j.headers)
	if parent.IsValid() && !parent.IsSampled() {
		j.untraced = true // its sender decided (above)
		return
	}
	span := t.start(j.q.name, j.id, parent, jobtrace.OpReceive, trace.SpanKindServer, at)
	if !span.IsRecording() {
		j.untraced = true // the broker's sampler said no: not asked again
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

// event follows j's life: it is called with each of j's events
// (emitJob).
func (t *tracing) event(kind string, j *job, reason string) {
	if t == nil || j.untraced {
		return
	}
	if kind == EventDispatched {
		t.dispatched(j, time.Now())
		return
	}
	jt := t.jobs[j]
	if jt == nil {
		return
	}
	now := time.Now()
	switch kind {
	case EventAcked:
		if jt.span != nil {
			t.endAt(jt.span, now)
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
			t.waited(j, jt.parent, jt.since, now, kind)
			return
		}
		t.end(jt, kind, reason, now)
	}
}

// dispatched ends j's wait and starts its delivery. A job without a
// record (replayed, revived, or one whose receive was not sampled) gets
// one here when its delivery is sampled.
func (t *tracing) dispatched(j *job, now time.Time) {
	jt := t.jobs[j]
	var parent trace.SpanContext
	var opts []trace.SpanStartOption
	if jt != nil {
		parent = jt.parent
		if !jt.since.IsZero() {
			t.waited(j, parent, jt.since, now, "")
		}
		if jt.prev.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: jt.prev}))
		}
	} else if parent = jobtrace.SpanContext(j.headers); parent.IsValid() && !parent.IsSampled() {
		j.untraced = true // its sender's trace is not sampled
		return
	}
	span := t.start(j.q.name, j.id, parent, jobtrace.OpDispatch, trace.SpanKindProducer, now, opts...)
	if !span.IsRecording() {
		if jt == nil {
			j.untraced = true // the broker's sampler said no: not asked again
		}
		return
	}
	span.SetAttributes(jobtrace.Attempt(int(j.attempts) + 1))
	if jt == nil {
		if !parent.IsValid() {
			parent = span.SpanContext() // a trace that starts here
		}
		jt = &jobTrace{parent: parent}
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
	t.endAt(jt.span, now)
	jt.span = nil
}

// forget drops j's trace; a span still open (a REQUEST not stored) ends.
func (t *tracing) forget(j *job) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		if jt.span != nil {
			t.endAt(jt.span, time.Now())
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
