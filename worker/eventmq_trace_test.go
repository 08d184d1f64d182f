//go:build unix

package worker_test

import (
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// EventMQ's own job manager runs jobs that carry a trace: traceparent
// alone (the comma form of headers) and with a tracestate of two members
// (commas in a value: the JSON form), through a broker that traces them.
// It passes the headers it does not know by, and REPLYs to each.
func TestEventMQJobManagerRunsTracedJobs(t *testing.T) {
	t.Parallel()
	rec := newRecorder(t)
	b := bt.Start(t, "", func(o *broker.Options) { o.TracerProvider = rec.provider(t, "emq-broker") })
	startJobManager(t, b.Backend())
	client := bt.Dial(t, b.Frontend(), "c")
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, h := range []emqp.Headers{
		emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderReplyRequested}, emqp.Header{Name: emqp.HeaderTraceparent, Value: traceparent}),
		emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderReplyRequested}, emqp.Header{Name: emqp.HeaderTraceparent, Value: traceparent},
			emqp.Header{Name: emqp.HeaderTracestate, Value: "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"}),
	} {
		job := eventmqJob(emqp.NewID(), "os.path", "join", `"a", "b"`)
		job.Headers = h
		client.Send(job)
		bt.Expect[*emqp.Ack](client)
		if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != job.MsgID || string(r.Payload) != `{"value": "a/b"}` {
			t.Fatalf("REPLY for %s with headers %s: %s; want the job's", r.OrigMsgID, h, r.Payload)
		}
	}
	bt.Eventually(t, "the broker's dispatch spans", func() bool { return len(rec.spans("dispatch default")) == 2 })
	for _, s := range rec.spans("dispatch default") {
		if s.SpanContext().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("dispatch span in trace %s; want the job's", s.SpanContext().TraceID())
		}
	}
}
