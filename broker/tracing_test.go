package broker_test

import (
	"context"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/jobtrace"
)

// tracedBroker runs a broker whose spans go to a recorder.
func tracedBroker(t *testing.T, dir string) (*bt.Broker, *tracetest.SpanRecorder) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	b := bt.Start(t, dir, func(o *broker.Options) {
		bt.Fast(o)
		o.TracerProvider = tp
	})
	return b, rec
}

func spansOf(rec *tracetest.SpanRecorder, msgid string) map[string][]sdktrace.ReadOnlySpan {
	out := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		for _, kv := range s.Attributes() {
			if kv.Key == "messaging.message.id" && kv.Value.AsString() == msgid {
				out[s.Name()] = append(out[s.Name()], s)
			}
		}
	}
	return out
}

func events(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for _, e := range s.Events() {
		names = append(names, e.Name)
	}
	return names
}

const unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"

// A job whose sender did not sample its trace makes no span in the
// broker and goes to its worker with its traceparent as sent; one that
// came without a trace starts one in the broker (receive, then dispatch
// under it), and its worker gets the dispatch span as its parent.
func TestBrokerSpansFollowTheSendersDecision(t *testing.T) {
	t.Parallel()
	b, rec := tracedBroker(t, "")
	c := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")

	quiet := c.Request("q", "traceparent:"+unsampled, nil)
	w.Ready(1)
	req := bt.Expect[*emqp.Request](w)
	if tp, _ := req.Headers.Get(emqp.HeaderTraceparent); req.MsgID != quiet || tp != unsampled {
		t.Fatalf("job %s went out with traceparent %q; want %s's as sent", req.MsgID, tp, quiet)
	}
	w.Reply(quiet, nil)

	rooted := c.Request("q", "", nil)
	w.Ready(1)
	req = bt.Expect[*emqp.Request](w)
	w.Reply(rooted, nil)
	bt.Eventually(t, "the rooted job's dispatch span", func() bool { return len(spansOf(rec, rooted)["dispatch q"]) == 1 })
	if n := len(spansOf(rec, quiet)); n != 0 {
		t.Errorf("%d spans of the job whose trace is not sampled; want none", n)
	}
	spans := spansOf(rec, rooted)
	receive, dispatch := spans["receive q"][0], spans["dispatch q"][0]
	if receive.Parent().IsValid() || dispatch.Parent().SpanID() != receive.SpanContext().SpanID() {
		t.Errorf("receive's parent %v, dispatch's parent %v; want a root, then the receive span", receive.Parent(), dispatch.Parent())
	}
	if got := jobtrace.SpanContext(req.Headers); got.SpanID() != dispatch.SpanContext().SpanID() || !got.IsSampled() {
		t.Errorf("the worker got span context %v; want the dispatch span's", got)
	}
	if ev := events(dispatch); !slices.Contains(ev, "replied") {
		t.Errorf("dispatch events %v; want replied", ev)
	}
}

const sampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// A delivery that ends without a REPLY ends its span saying why: a
// worker lost (requeued), and a cancel of a job that waits ends its wait.
// After a restart a journaled job's next delivery is in its trace still.
func TestBrokerSpansOfLostCancelledAndReplayedJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b, rec := tracedBroker(t, dir)
	c := bt.Dial(t, b.Frontend(), "c")
	lost := c.Request("q", "traceparent:"+sampled, nil)
	waiting := c.Request("other", "traceparent:"+sampled, nil)
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	w.Close() // lost at the heartbeat timeout
	bt.Eventually(t, "the lost delivery's span", func() bool { return len(spansOf(rec, lost)["dispatch q"]) == 1 })
	if ev := events(spansOf(rec, lost)["dispatch q"][0]); !slices.Contains(ev, broker.EventWorkerLost) || !slices.Contains(ev, broker.EventRequeued) {
		t.Errorf("lost delivery's events %v; want worker_lost and requeued", ev)
	}
	if _, err := b.Cancel(context.Background(), waiting, "admin"); err != nil {
		t.Fatal(err)
	}
	bt.Eventually(t, "the cancelled job's wait span", func() bool { return len(spansOf(rec, waiting)["wait other"]) == 1 })
	if ev := events(spansOf(rec, waiting)["wait other"][0]); !slices.Contains(ev, broker.EventCancelled) {
		t.Errorf("cancelled job's wait events %v; want cancelled", ev)
	}
	for _, s := range append(spansOf(rec, lost)["receive q"], spansOf(rec, waiting)["receive other"]...) {
		if s.Parent().TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("receive span's parent %v; want the job's traceparent", s.Parent())
		}
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}

	b, rec = tracedBroker(t, dir)
	w = bt.Worker(t, b.Backend(), "w2", "q")
	w.Ready(1)
	if req := bt.Expect[*emqp.Request](w); req.MsgID != lost {
		t.Fatalf("after the restart: %s; want %s", req.MsgID, lost)
	}
	w.Reply(lost, nil)
	bt.Eventually(t, "the replayed job's dispatch span", func() bool { return len(spansOf(rec, lost)["dispatch q"]) == 1 })
	if d := spansOf(rec, lost)["dispatch q"][0]; d.Parent().SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("replayed job's dispatch parent %v; want its traceparent's span", d.Parent())
	}
}
