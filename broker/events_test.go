package broker_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

// sseReader reads a Server-Sent Events stream's events.
type sseReader struct {
	t      *testing.T
	events chan broker.Event
}

func openEvents(t *testing.T, b *bt.Broker, query string) *sseReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+b.AdminAddr()+"/api/v1/events?"+query, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := &sseReader{t: t, events: make(chan broker.Event, 1000)}
	go func() {
		defer resp.Body.Close()
		defer close(r.events)
		sc := bufio.NewScanner(resp.Body)
		kind := ""
		for sc.Scan() {
			line := sc.Text()
			if k, ok := strings.CutPrefix(line, "event: "); ok {
				kind = k
			}
			if data, ok := strings.CutPrefix(line, "data: "); ok {
				var e broker.Event
				if json.Unmarshal([]byte(data), &e) != nil || e.Kind != kind && kind != "dropped" {
					t.Errorf("event %q with data %s", kind, data)
				}
				if kind == "dropped" {
					e.Kind = "dropped"
				}
				r.events <- e
			}
		}
	}()
	// The stream is open once the broker has the listener.
	bt.Eventually(t, "listening", func() bool { return listeners(t, b) > 0 })
	return r
}

// listeners reads emq_event_listeners.
func listeners(t *testing.T, b *bt.Broker) float64 {
	f := bt.ScrapeMetrics(t, b)["emq_event_listeners"]
	if f == nil || len(f.Metric) == 0 {
		return 0
	}
	return f.Metric[0].GetGauge().GetValue()
}

func (r *sseReader) next() broker.Event {
	r.t.Helper()
	select {
	case e, ok := <-r.events:
		if !ok {
			r.t.Fatal("the event stream ended")
		}
		return e
	case <-time.After(bt.Wait):
		r.t.Fatal("no event")
	}
	return broker.Event{}
}

// A listener of a queue sees its jobs' lives as they happen, in order,
// and nothing of other queues.
func TestEventStream(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fast, nil)
	events := openEvents(t, b, "queue=q")
	client := bt.Dial(t, b.Frontend(), "c")
	client.Request("other", "", nil)
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(2)
	ok := client.Request("q", "", nil)
	bt.Expect[*emqp.Request](worker)
	worker.Reply(ok, nil)
	// Two connections: the next REQUEST could overtake this REPLY.
	bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == 1 })
	doomed := client.Request("q", "retry-count:0", nil)
	bt.Expect[*emqp.Request](worker)
	worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: doomed, Reason: "no disk"})

	for _, want := range []broker.Event{
		{Kind: broker.EventAcked, MsgID: ok},
		{Kind: broker.EventDispatched, MsgID: ok, Worker: "backend/w", Attempt: 1},
		{Kind: broker.EventReplied, MsgID: ok, Worker: "backend/w"},
		{Kind: broker.EventAcked, MsgID: doomed},
		{Kind: broker.EventDispatched, MsgID: doomed, Worker: "backend/w", Attempt: 1},
		{Kind: broker.EventFailed, MsgID: doomed, Worker: "backend/w", Reason: "no disk"},
		{Kind: broker.EventBuried, MsgID: doomed, Reason: "no disk"},
	} {
		e := events.next()
		if e.Kind != want.Kind || e.MsgID != want.MsgID || e.Worker != want.Worker || e.Attempt != want.Attempt ||
			e.Reason != want.Reason || e.Queue != "q" || e.Time.IsZero() {
			t.Fatalf("event %+v, want %+v of queue q", e, want)
		}
	}
}

// A listener that does not read is dropped once its buffer is full; the
// broker goes on as if nobody listened.
func TestStuckListenerIsDropped(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) {
		fast(o)
		o.EventBuffer = 8
		o.MaxEventListeners = 1
	})
	ctx := context.Background()
	stuck, err := b.Listen(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Listen(ctx, "", ""); err != broker.ErrTooManyListeners {
		t.Fatalf("a second listener past max-event-listeners: %v", err)
	}
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	for range 10 {
		id := client.Request("q", "", nil)
		bt.Expect[*emqp.Request](worker)
		worker.Reply(id, nil)
		worker.Ready(1)
	}
	bt.Eventually(t, "every job replied", func() bool { return b.Stats().Replied == 10 })
	got, err := stuck.Next(ctx)
	if len(got) != 8 || err != nil {
		t.Fatalf("the stuck listener's buffer: %d events, %v; want 8", len(got), err)
	}
	if _, err := stuck.Next(ctx); err != broker.ErrDropped || b.Stats().ListenersDropped != 1 {
		t.Fatalf("then: %v, dropped %d; want ErrDropped, 1", err, b.Stats().ListenersDropped)
	}
	again, err := b.Listen(ctx, "", "") // its place is free again
	if err != nil {
		t.Fatal(err)
	}
	again.Close()
	if _, err := again.Next(ctx); err != broker.ErrStopped {
		t.Fatalf("a closed stream: %v", err)
	}
}

// A job's trail says what happened to it, with its workers and reasons;
// what its journal writes carried survives a SIGKILL of the broker, and
// a delivery under way shows before it is written.
func TestTrailSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	adminAddr := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	c := startChild(t, dir, frontend, backend, "EMQ_TEST_ADMIN="+adminAddr)
	client := bt.Dial(t, frontend, "c")
	worker := bt.Worker(t, backend, "w", "q")
	id := client.Request("q", "retry-count:1", nil)
	for range 2 {
		worker.Ready(1)
		j := bt.Expect[*emqp.Request](worker)
		worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: j.MsgID, Reason: "no disk"})
	}
	hc := &http.Client{Timeout: bt.Wait}
	t.Cleanup(hc.CloseIdleConnections)
	bt.Eventually(t, "buried in the journal", func() bool { // the API reads what the journal has
		resp, err := hc.Get("http://" + adminAddr + "/api/v1/jobs/" + id)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var ji admin.JobInfo
		return json.NewDecoder(resp.Body).Decode(&ji) == nil && ji.State == "dead"
	})
	c.kill()

	b := bt.StartAdmin(t, dir, fast, nil)
	var ji admin.JobInfo
	if code := bt.API(t, b, "GET", "/api/v1/jobs/"+id, "", &ji); code != 200 {
		t.Fatalf("GET job: %d", code)
	}
	for _, e := range ji.Trail {
		if e.Worker != "" && e.Worker != "backend/w" || e.Time.IsZero() {
			t.Errorf("event %+v", e)
		}
		if e.Kind == broker.EventFailed && e.Reason != "no disk" {
			t.Errorf("failed without its reason: %+v", e)
		}
	}
	if got, want := bt.TrailKinds(ji.Trail), "received dispatched#1 failed retry dispatched#2 failed buried"; got != want {
		t.Fatalf("trail %q, want %q", got, want)
	}
}
