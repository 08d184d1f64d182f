//go:build unix

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"

	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/jaegertest"
)

// One job through emq send, emq broker and emq worker --exec, each a
// process exporting its spans to a real Jaeger by the OTEL_* variables
// alone; the job fails once and runs again. Jaeger's query API gives
// back one trace: the caller's span, the client's publish span, the
// broker's receive, wait and dispatch spans, and the worker's process
// spans, each under its parent; the failed delivery says failed and
// retry, the second links to it (FOLLOWS_FROM) and says replied; the
// command ran with the worker's span as its TRACEPARENT.
func TestTraceInJaeger(t *testing.T) {
	t.Parallel()
	j := jaegertest.Start(t, "")
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	startBrokerProcessEnv(t, j.Env("emq-broker"), "--frontend", frontend, "--backend", backend,
		"--data-dir", t.TempDir(), "--publisher-incoming", "", "--publisher-outgoing", "",
		"--retry-backoff", "100ms")
	startWorkerProcessEnv(t, j.Env("emq-worker"), "--broker", backend, "--queues", "signup",
		"--exec", `[ "$EMQ_ATTEMPT" = 1 ] && { echo "the mail server said no" >&2; exit 1; }; printf '%s' "$TRACEPARENT"`)

	// The caller: a web request's span in the test process.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("web"))))
	defer tp.Shutdown(context.Background())
	_, web := tp.Tracer("web").Start(context.Background(), "POST /signup")
	sc := web.SpanContext()
	traceparent := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"

	send := exec.Command(os.Args[0], "send", "--broker", frontend, "--queue", "signup", "--reply", "--retry-count", "3", "--wait", "30s", "welcome mail")
	send.Env = bt.ChildEnv(append(j.Env("emq-client"), mainEnv+"=1", "TRACEPARENT="+traceparent)...)
	var out, errOut bytes.Buffer
	send.Stdout, send.Stderr = &out, &errOut
	if err := send.Run(); err != nil {
		t.Fatalf("emq send: %v\n%s", err, errOut.String())
	}
	web.End()

	want := map[string]int{"web: POST /signup": 1, "emq-client: publish signup": 1, "emq-broker: receive signup": 1,
		"emq-broker: wait signup": 2, "emq-broker: dispatch signup": 2, "emq-worker: process signup": 2}
	spans := j.WaitTrace(t, sc.TraceID().String(), func(spans []jaegertest.Span) bool {
		got := map[string]int{}
		for _, s := range spans {
			got[s.Service+": "+s.OperationName]++
		}
		for k, n := range want {
			if got[k] < n {
				return false
			}
		}
		return true
	})
	byName := map[string][]jaegertest.Span{}
	byID := map[string]jaegertest.Span{}
	for _, s := range spans {
		byName[s.OperationName] = append(byName[s.OperationName], s)
		byID[s.SpanID] = s
	}
	slices.SortFunc(byName["dispatch signup"], func(a, b jaegertest.Span) int { return int(a.StartTime - b.StartTime) })
	slices.SortFunc(byName["process signup"], func(a, b jaegertest.Span) int { return int(a.StartTime - b.StartTime) })
	parentOf := func(s jaegertest.Span) string { return byID[s.Parent()].OperationName }

	publish := byName["publish signup"][0]
	if publish.Parent() != sc.SpanID().String() {
		t.Errorf("publish span's parent %q; want the web request's span", publish.Parent())
	}
	if publish.Tag("messaging.system") != "emq" || publish.Tag("messaging.destination.name") != "signup" {
		t.Errorf("publish span's tags %+v", publish.Tags)
	}
	msgid := publish.Tag("messaging.message.id")
	for _, s := range spans {
		if s.Service != "web" && s.Tag("messaging.message.id") != msgid {
			t.Errorf("%s %s: message id %q; want %q", s.Service, s.OperationName, s.Tag("messaging.message.id"), msgid)
		}
	}
	for _, s := range append(byName["receive signup"], byName["wait signup"]...) {
		if p := parentOf(s); p != "publish signup" {
			t.Errorf("%s's parent is %q; want the publish span", s.OperationName, p)
		}
	}
	first, second := byName["dispatch signup"][0], byName["dispatch signup"][1]
	if ev := first.Events(); !slices.Contains(ev, "failed") || !slices.Contains(ev, "retry") {
		t.Errorf("first delivery's events %v; want failed and retry", ev)
	}
	if ev := second.Events(); !slices.Contains(ev, "replied") {
		t.Errorf("second delivery's events %v; want replied", ev)
	}
	follows := false
	for _, r := range second.References {
		follows = follows || r.RefType == "FOLLOWS_FROM" && r.SpanID == first.SpanID
	}
	if !follows {
		t.Errorf("second delivery's references %+v; want FOLLOWS_FROM the first", second.References)
	}
	for i, p := range byName["process signup"] {
		if p.Parent() != byName["dispatch signup"][i].SpanID {
			t.Errorf("process span %d's parent is %s %q; want delivery %d's span", i+1, p.Parent(), parentOf(p), i+1)
		}
	}
	if lastRun := byName["process signup"][1]; !strings.Contains(out.String(), lastRun.SpanID) {
		t.Errorf("the command's TRACEPARENT %q does not name its process span %s", out.String(), lastRun.SpanID)
	}
	t.Logf("the trace in Jaeger's UI: %s", j.UIURL(sc.TraceID().String()))
}
