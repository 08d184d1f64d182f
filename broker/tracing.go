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
// span, which starts a trace. Nothing is open while a job waits: a wait
// span is made when it ends, with the time it began, so a backlog holds
// no spans, only a jobTrace (about 100 bytes) per sampled job.
//
// The loop only starts the spans whose ids it needs: a delivery's (its
// id goes to the worker in traceparent) and the receive span of a job
// that starts its trace here. Everything else, the other spans, their
// attributes and events, and every end (a copy of the span handed to the
// exporter's batch), goes in order to the ender goroutine: the loop
// collects them during a turn and hands them over at its end, one
// channel send and at most one wake-up a turn; a loop that gets endQueue
// turns ahead of the ender waits for it.
//
// A job whose traceparent says "not sampled" makes no span in the broker,
// whatever the broker's sampler: the sender's decision holds for the
// whole trace, as OpenTelemetry's parent-based samplers (the default)
// have it, and such a job costs the loop one read of its headers (then
// it is marked untraced). The broker's sampler decides for jobs that
// come without a trace.

// tracing is the loop's record of the traced jobs. A nil *tracing is
// tracing off: every method returns at once.
type tracing struct {
	tracer trace.Tracer
	jobs   map[*job]*jobTrace
	turn   []func()             // this turn's changes, for the ender
	later  chan []func()        // to the ender, in order; nil while it does not run
	ended  chan struct{}        // closed when the ender has stopped
	attrs  []attribute.KeyValue // a span's attributes, made where do runs fn (the spans copy them)
}

// jobTrace is what the loop keeps of a sampled job's trace.
type jobTrace struct {
	parent   trace.SpanContext // its spans' parent
	span     trace.Span        // dispatch while in flight; a receive span while journaling; else nil
	received time.Time         // while journaling without a receive span: when the REQUEST came
	since    time.Time         // pending (or delayed) since; zero = not known (replayed)
	prev     trace.SpanContext // the last attempt's dispatch span
}

// endQueue is how many turns' changes may wait for the ender; endBatch
// the most one turn hands over at once.
const (
	endQueue = 256
	endBatch = 1024
)

func newTracing(tp trace.TracerProvider) *tracing {
	if tp == nil {
		return nil
	}
	return &tracing{tracer: tp.Tracer(jobtrace.ScopeName), jobs: make(map[*job]*jobTrace)}
}

// run starts the ender; stop lets it finish what waits and stops it. Both
// run on the loop's goroutine (Run's); before run and after stop, span
// changes are made at once.
func (t *tracing) run() (stop func()) {
	if t == nil {
		return func() {}
	}
	t.later, t.ended = make(chan []func(), endQueue), make(chan struct{})
	go func() {
		defer close(t.ended)
		for turn := range t.later {
			for _, fn := range turn {
				fn()
			}
		}
	}()
	return func() {
		t.flush()
		close(t.later)
		<-t.ended
		t.later = nil
	}
}

// do has the ender run fn after what the loop gave it before.
func (t *tracing) do(fn func()) {
	if t.later == nil {
		fn()
		return
	}
	t.turn = append(t.turn, fn)
	if len(t.turn) >= endBatch {
		t.flush()
	}
}

// flush hands the turn's changes to the ender; the loop calls it at the
// end of each turn.
func (t *tracing) flush() {
	if t == nil || len(t.turn) == 0 || t.later == nil {
		return
	}
	t.later <- t.turn
	t.turn = nil
}

var (
	kindServer   = trace.WithSpanKind(trace.SpanKindServer)
	kindInternal = trace.WithSpanKind(trace.SpanKindInternal)
	kindProducer = trace.WithSpanKind(trace.SpanKindProducer)
)

// start makes a span of the job msgid of queue under parent, from at.
func (t *tracing) start(queue, msgid string, parent trace.SpanContext, op string, kind trace.SpanStartOption, at time.Time, opts ...trace.SpanStartOption) trace.Span {
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	}
	opts = append(opts, kind, trace.WithTimestamp(at))
	_, span := t.tracer.Start(ctx, jobtrace.SpanName(op, queue), opts...)
	return span
}

// describe sets a span's attributes, on the ender.
func (t *tracing) describe(span trace.Span, op, queue, msgid string, more ...attribute.KeyValue) {
	t.do(func() {
		if span.IsRecording() {
			span.SetAttributes(t.attrsOf(op, queue, msgid, more...)...)
		}
	})
}

// attrsOf are a span's attributes in t.attrs, for a function given to do.
func (t *tracing) attrsOf(op, queue, msgid string, more ...attribute.KeyValue) []attribute.KeyValue {
	t.attrs = append(jobtrace.AppendAttrs(t.attrs[:0], op, queue, msgid), more...)
	return t.attrs
}

// made makes a span that began at start and ended at end, on the ender;
// event, if not "", says how it ended; status, if not "", is an error.
func (t *tracing) made(queue, msgid string, parent trace.SpanContext, op string, kind trace.SpanStartOption, start, end time.Time, event, status string) {
	t.do(func() {
		span := t.start(queue, msgid, parent, op, kind, start)
		if !span.IsRecording() {
			return
		}
		span.SetAttributes(t.attrsOf(op, queue, msgid)...)
		if event != "" {
			span.AddEvent(event, trace.WithTimestamp(end))
		}
		if status != "" {
			span.SetStatus(codes.Error, status)
		}
		span.End(trace.WithTimestamp(end))
	})
}

// received notes a new job's REQUEST: the receive span of a job in a
// sampled trace is made when it is journaled; one without a trace starts
// its trace here.
func (t *tracing) received(j *job, at time.Time) {
	if t == nil {
		return
	}
	parent := jobtrace.SpanContext(j.headers)
	switch {
	case parent.IsValid() && !parent.IsSampled():
		j.untraced = true // its sender decided (above)
	case parent.IsValid():
		t.jobs[j] = &jobTrace{parent: parent, received: at}
	default:
		span := t.start(j.q.name, j.id, parent, jobtrace.OpReceive, kindServer, at)
		if !span.IsRecording() {
			j.untraced = true // the broker's sampler said no: not asked again
			return
		}
		t.describe(span, jobtrace.OpReceive, j.q.name, j.id)
		t.jobs[j] = &jobTrace{parent: span.SpanContext(), span: span}
	}
}

// stored ends the receive span of a job journaled (status "") or not
// (status says why).
func (t *tracing) stored(j *job, jt *jobTrace, now time.Time, status string) {
	switch {
	case jt.span != nil:
		span := jt.span
		t.do(func() {
			if status != "" {
				span.SetStatus(codes.Error, status)
			}
			span.End(trace.WithTimestamp(now))
		})
		jt.span = nil
	case !jt.received.IsZero():
		t.made(j.q.name, j.id, jt.parent, jobtrace.OpReceive, kindServer, jt.received, now, "", status)
		jt.received = time.Time{}
	}
}

// refused ends the receive span of a job that was not stored.
func (t *tracing) refused(j *job, code, text string) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		t.stored(j, jt, time.Now(), code+": "+text)
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
		t.stored(j, jt, now, "")
		jt.since = now
	case EventReplied:
		t.end(jt, "replied", "", "", now)
	case EventFailed, EventTimedOut, EventWorkerLost:
		if span := jt.span; span != nil {
			t.do(func() {
				span.AddEvent(kind, eventReason(reason), trace.WithTimestamp(now))
				span.SetStatus(codes.Error, kind+": "+reason)
			})
		}
	case EventRetry, EventRequeued:
		t.end(jt, kind, reason, "", now)
		jt.since = now
	case EventBuried:
		t.end(jt, "dead-lettered", reason, "", now)
	case EventCancelled, EventRemoved:
		switch {
		case jt.span != nil || !jt.received.IsZero(): // in flight, or journaling
			t.stored(j, jt, now, "")
			t.end(jt, kind, reason, "", now)
		case !jt.since.IsZero(): // it waited: the wait ends here
			t.made(j.q.name, j.id, jt.parent, jobtrace.OpWait, kindInternal, jt.since, now, kind, "")
			jt.since = time.Time{}
		}
	}
}

// dispatched ends j's wait and starts its delivery. A job without a
// record (replayed, revived) gets one here when its delivery is sampled.
func (t *tracing) dispatched(j *job, now time.Time) {
	jt := t.jobs[j]
	var parent trace.SpanContext
	var opts []trace.SpanStartOption
	if jt != nil {
		parent = jt.parent
		if !jt.since.IsZero() {
			t.made(j.q.name, j.id, parent, jobtrace.OpWait, kindInternal, jt.since, now, "", "")
		}
		if jt.prev.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: jt.prev}))
		}
	} else if parent = jobtrace.SpanContext(j.headers); parent.IsValid() && !parent.IsSampled() {
		j.untraced = true // its sender's trace is not sampled
		return
	}
	span := t.start(j.q.name, j.id, parent, jobtrace.OpDispatch, kindProducer, now, opts...)
	if !span.IsRecording() {
		if jt == nil {
			j.untraced = true // the broker's sampler said no: not asked again
		}
		return
	}
	t.describe(span, jobtrace.OpDispatch, j.q.name, j.id, jobtrace.Attempt(int(j.attempts)+1))
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
	if t == nil || j.untraced {
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
	if t == nil || j.untraced {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		now := time.Now()
		t.end(jt, "not delivered", "", "", now)
		jt.since = now
	}
}

// end ends jt's delivery, if it is open, with an event saying why.
func (t *tracing) end(jt *jobTrace, what, reason, status string, now time.Time) {
	span := jt.span
	if span == nil {
		return
	}
	jt.prev, jt.span = span.SpanContext(), nil
	t.do(func() {
		span.AddEvent(what, eventReason(reason), trace.WithTimestamp(now))
		if status != "" {
			span.SetStatus(codes.Error, status)
		}
		span.End(trace.WithTimestamp(now))
	})
}

// forget drops j's trace; a span still open (a REQUEST not stored, a
// job whose payload could not be read) ends.
func (t *tracing) forget(j *job) {
	if t == nil {
		return
	}
	if jt := t.jobs[j]; jt != nil {
		now := time.Now()
		t.stored(j, jt, now, "")
		t.end(jt, "forgotten", "", "", now)
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
// delivery's span in the broker, else the span its traceparent names.
func (t *tracing) logAttrs(j *job) []any {
	if t != nil {
		if jt := t.jobs[j]; jt != nil && jt.span != nil {
			return jobtrace.LogAttrs(jt.span.SpanContext())
		}
	}
	return jobtrace.LogAttrs(jobtrace.SpanContext(j.headers))
}
