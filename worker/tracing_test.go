package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/worker"
)

// recorder gives each of client, broker and worker a tracer provider of
// its own (its service name), all recording into one SpanRecorder.
type recorder struct {
	*tracetest.SpanRecorder
}

func newRecorder(t *testing.T) recorder {
	return recorder{tracetest.NewSpanRecorder()}
}

func (r recorder) provider(t *testing.T, service string) trace.TracerProvider {
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.SpanRecorder),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName(service))))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return tp
}

// spans returns the ended spans named name, in the order they ended.
func (r recorder) spans(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

func eventNames(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

// logBuffer is a slog handler's output the test reads while the
// broker and the worker write it.
type logBuffer struct{ testutil.Buffer }

// line returns the first line that holds every one of parts.
func (l *logBuffer) line(parts ...string) string {
	for _, line := range strings.Split(l.String(), "\n") {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(line, p) }) {
			return line
		}
	}
	return ""
}

// One job, sent in the caller's trace, failed once and retried: the
// client's publish span, the broker's receive, wait and dispatch spans
// and the worker's process spans are one trace, each where it belongs;
// the retry and the dead letter are span events; the second delivery
// links to the first; the worker's handler runs in its span; the log
// lines about the job carry its trace.
func TestJobTraceThroughClientBrokerAndWorker(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	logs := new(logBuffer)
	b := bt.Start(t, "", func(o *broker.Options) {
		bt.Fast(o)
		o.TracerProvider = rec.provider(t, "emq-broker")
		o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	})
	c, err := client.New(client.Options{Broker: b.Frontend(), Logger: bt.Logger(t), TracerProvider: rec.provider(t, "emq-client")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	handlerSpans := make(chan trace.SpanContext, 10)
	w, err := worker.New(worker.Options{Broker: b.Backend(), Logger: slog.New(slog.NewTextHandler(logs, nil)),
		HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: 500 * time.Millisecond,
		TracerProvider: rec.provider(t, "emq-worker")})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("q", func(ctx context.Context, job *worker.Job) ([]byte, error) {
		handlerSpans <- trace.SpanContextFromContext(ctx)
		if job.Attempt == 1 || strings.Contains(string(job.Payload), "always") {
			return nil, errors.New("disk on fire")
		}
		return []byte("done"), nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- w.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-runDone })

	// The caller's own span, as a web request's would be.
	app := rec.provider(t, "app").Tracer("app")
	appCtx, appSpan := app.Start(context.Background(), "POST /signup")
	reply, err := c.Request(appCtx, "q", []byte("once"), client.RetryCount(3))
	appSpan.End()
	if err != nil || string(reply) != "done" {
		t.Fatalf("Request: %q, %v", reply, err)
	}
	traceID := appSpan.SpanContext().TraceID()
	bt.Eventually(t, "the second delivery's span", func() bool { return len(rec.spans("dispatch q")) == 2 })

	one := func(name string) sdktrace.ReadOnlySpan {
		t.Helper()
		spans := rec.spans(name)
		if len(spans) != 1 {
			t.Fatalf("%d spans %q; want 1", len(spans), name)
		}
		return spans[0]
	}
	publish := one("publish q")
	if publish.Parent().SpanID() != appSpan.SpanContext().SpanID() || publish.SpanKind() != trace.SpanKindProducer {
		t.Errorf("publish span: parent %s kind %v; want the app's span, producer", publish.Parent().SpanID(), publish.SpanKind())
	}
	msgid := attr(publish, "messaging.message.id").AsString()
	for _, s := range rec.Ended() {
		if s.Name() == "POST /signup" {
			continue
		}
		if s.SpanContext().TraceID() != traceID {
			t.Errorf("span %q is in trace %s; want the app's %s", s.Name(), s.SpanContext().TraceID(), traceID)
		}
		if attr(s, "messaging.system").AsString() != "emq" || attr(s, "messaging.destination.name").AsString() != "q" ||
			attr(s, "messaging.message.id").AsString() != msgid {
			t.Errorf("span %q attributes %v; want messaging.system emq, destination q, message id %s", s.Name(), s.Attributes(), msgid)
		}
	}
	receive := one("receive q")
	if receive.Parent().SpanID() != publish.SpanContext().SpanID() || receive.SpanKind() != trace.SpanKindServer {
		t.Errorf("receive span: parent %s kind %v; want the publish span, server", receive.Parent().SpanID(), receive.SpanKind())
	}
	if !receive.EndTime().Before(publish.EndTime()) && !receive.EndTime().Equal(publish.EndTime()) {
		t.Errorf("receive span ended at %v, after the client's ACK at %v", receive.EndTime(), publish.EndTime())
	}
	if waits := rec.spans("wait q"); len(waits) != 2 {
		t.Errorf("%d wait spans; want 2 (before each delivery)", len(waits))
	}
	dispatches := rec.spans("dispatch q")
	first, second := dispatches[0], dispatches[1]
	if got := eventNames(first); !slices.Contains(got, broker.EventFailed) || !slices.Contains(got, broker.EventRetry) {
		t.Errorf("first delivery's events %v; want failed and retry", got)
	}
	if first.Status().Code != codes.Error {
		t.Errorf("first delivery's status %v; want an error", first.Status())
	}
	if got := eventNames(second); !slices.Contains(got, "replied") {
		t.Errorf("second delivery's events %v; want replied", got)
	}
	if len(second.Links()) != 1 || second.Links()[0].SpanContext.SpanID() != first.SpanContext().SpanID() {
		t.Errorf("second delivery's links %v; want the first delivery", second.Links())
	}
	if attr(first, "emq.attempt").AsInt64() != 1 || attr(second, "emq.attempt").AsInt64() != 2 {
		t.Errorf("attempts %v, %v; want 1, 2", attr(first, "emq.attempt"), attr(second, "emq.attempt"))
	}
	processes := rec.spans("process q")
	if len(processes) != 2 {
		t.Fatalf("%d process spans; want 2", len(processes))
	}
	for i, p := range processes {
		if p.Parent().SpanID() != dispatches[i].SpanContext().SpanID() || p.SpanKind() != trace.SpanKindConsumer {
			t.Errorf("process span %d: parent %s, kind %v; want delivery %d's span, consumer", i+1, p.Parent().SpanID(), p.SpanKind(), i+1)
		}
		if got := <-handlerSpans; got.SpanID() != p.SpanContext().SpanID() {
			t.Errorf("handler %d ran in span %s; want its process span %s", i+1, got.SpanID(), p.SpanContext().SpanID())
		}
	}
	if processes[0].Status().Code != codes.Error || processes[1].Status().Code == codes.Error {
		t.Errorf("process statuses %v, %v; want an error, then none", processes[0].Status(), processes[1].Status())
	}
	if line := logs.line("job failed", msgid, "trace_id="+traceID.String(), "span_id="+processes[0].SpanContext().SpanID().String()); line == "" {
		t.Errorf("no worker log line about the FAIL with its trace_id and span_id:\n%s", logs.String())
	}

	// A job that fails every time: its last delivery says it went to the
	// dead letters, and so does the broker's log line, with its trace.
	appCtx, appSpan = app.Start(context.Background(), "POST /doomed")
	doomed, err := c.Send(appCtx, "q", []byte("always"), client.RetryCount(0))
	appSpan.End()
	if err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, "the dead job's delivery span", func() bool {
		for _, s := range rec.spans("dispatch q") {
			if attr(s, "messaging.message.id").AsString() == doomed && slices.Contains(eventNames(s), "dead-lettered") {
				return true
			}
		}
		return false
	})
	if line := logs.line("dead letters", doomed, "trace_id="+appSpan.SpanContext().TraceID().String(), "span_id="); line == "" {
		t.Errorf("no broker log line about the dead letter with its trace:\n%s", logs.String())
	}
}

// With tracing off in the broker (no TracerProvider), a job's trace
// context is still kept and passed on as sent: the worker's handler runs
// under the client's span, with no SDK anywhere but the client's.
func TestTraceContextPassesABrokerWithoutTracing(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	b := bt.Start(t, "", func(o *broker.Options) { o.ResultTTL = time.Hour })
	c, err := client.New(client.Options{Broker: b.Frontend(), Logger: bt.Logger(t), TracerProvider: rec.provider(t, "emq-client")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	got := make(chan trace.SpanContext, 1)
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"q": func(ctx context.Context, job *worker.Job) ([]byte, error) {
			got <- trace.SpanContextFromContext(ctx)
			return nil, nil
		},
	})
	// The caller's trace came from elsewhere with a tracestate of two
	// members: commas, so the headers go in the JSON form.
	ts, _ := trace.ParseTraceState("emq=1,other=2")
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	remote := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, TraceState: ts, Remote: true})
	msgid, err := c.Send(trace.ContextWithRemoteSpanContext(ctxWait(t), remote), "q", nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := <-got
	publish := rec.spans("publish q")
	if len(publish) != 1 {
		t.Fatalf("%d publish spans", len(publish))
	}
	if sc.TraceID() != publish[0].SpanContext().TraceID() || sc.SpanID() != publish[0].SpanContext().SpanID() || !sc.IsRemote() {
		t.Errorf("handler's span context %v; want the client's publish span %v, remote", sc, publish[0].SpanContext())
	}
	if sc.TraceState().String() != "emq=1,other=2" {
		t.Errorf("handler's tracestate %q; want the caller's (JSON headers through the broker)", sc.TraceState())
	}
	job, _, err := b.Job(context.Background(), msgid)
	if err != nil {
		t.Fatal(err)
	}
	h, _ := emqp.ParseHeaders(job.Headers)
	if tp, _ := h.Get(emqp.HeaderTraceparent); !strings.Contains(tp, publish[0].SpanContext().SpanID().String()) {
		t.Errorf("stored traceparent %q; want the publish span's", tp)
	}
}

// A client and a worker made with no TracerProvider use OpenTelemetry's
// global one, also when the program sets it after they were made. (The
// global provider stays set for the tests after this one.)
func TestGlobalTracerProvider(t *testing.T) {
	rec := newRecorder(t)
	b := bt.Start(t, "", nil)
	c := newClient(t, b.Frontend())
	startWorker(t, b.Backend(), worker.Options{}, map[string]worker.Handler{
		"q": func(context.Context, *worker.Job) ([]byte, error) { return nil, nil },
	})
	otel.SetTracerProvider(rec.provider(t, "global"))
	if _, err := c.Request(ctxWait(t), "q", nil); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, "the worker's span", func() bool { return len(rec.spans("process q")) == 1 })
	publish, process := rec.spans("publish q"), rec.spans("process q")
	if len(publish) != 1 || process[0].Parent().SpanID() != publish[0].SpanContext().SpanID() {
		t.Fatalf("spans: publish %d, process's parent %v; want the publish span", len(publish), process[0].Parent())
	}
}
