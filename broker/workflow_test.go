package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// runAll has worker w (which offered slots already) reply to each job
// it gets until n have run, and returns their msgids in the order they
// came; a job whose payload is "fail" gets FAIL instead.
func runAll(t *testing.T, w *bt.Peer, n int) []string {
	t.Helper()
	var ran []string
	for len(ran) < n {
		req := bt.Expect[*emqp.Request](w)
		ran = append(ran, req.MsgID)
		if string(req.Payload) == "fail" {
			w.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: req.MsgID, Reason: "told to"})
		} else {
			w.Reply(req.MsgID, nil)
		}
		w.Ready(1)
	}
	return ran
}

// A chain of 100 jobs, each after the one before, all ACKed at once,
// runs in order on a worker with 4 slots; each waits in the journal, not
// in the broker, until its parent is done.
func TestWorkflowChainRunsInOrder(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "c")
		var chain []string
		for i := range 100 {
			h := ""
			if i > 0 {
				h = "after:" + chain[i-1]
			}
			chain = append(chain, c.Request("q", h, []byte(fmt.Sprint(i))))
		}
		if q := bt.QueueInfo(t, b, "q"); q.Pending != 1 {
			t.Fatalf("queue before any worker: %+v; want the head of the chain pending alone", q)
		}
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(4)
		if ran := runAll(t, w, 100); !slices.Equal(ran, chain) {
			t.Fatalf("ran out of order: %v", ran)
		}
	})
}

// A fan-out of 50 jobs in a batch and a callback after the batch: the
// callback runs once, after all 50; a job after several parents runs
// after each of them.
func TestWorkflowFanOutAndFanIn(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "c")
		var fan []string
		for range 50 {
			fan = append(fan, c.Request("q", "batch:nightly", nil))
		}
		callback := c.Request("q", "after-batch:nightly", []byte("callback"))
		both := c.Request("q", "after:"+fan[3]+";"+fan[40], []byte("both"))
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(8)
		ran := runAll(t, w, 52)
		at := func(id string) int { return slices.Index(ran, id) }
		if at(callback) != 51 && at(callback) != 50 || at(both) < max(at(fan[3]), at(fan[40])) {
			t.Fatalf("callback ran %d-th, both %d-th (parents %d, %d); want the callback after the 50", at(callback), at(both), at(fan[3]), at(fan[40]))
		}
		for _, id := range fan {
			if at(id) > at(callback) {
				t.Fatalf("a job of the batch ran after the callback")
			}
		}
		bb, _, err := b.Batch(context.Background(), "nightly")
		if err != nil || bb.Done != 50 || !bb.Complete() {
			t.Fatalf("batch: %+v, %v", bb, err)
		}
	})
}

// A parent that dies cancels the jobs after it (after-failed:cancel, the
// default), and theirs; one with after-failed:run runs anyway. The
// events say which, and the cancelled jobs are kept with the reason.
func TestWorkflowFailedParent(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(func(o *broker.Options) { o.ResultTTL = time.Hour })
		ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
		defer cancel()
		events, err := b.Listen(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer events.Close()
		c := bt.Dial(t, b.Frontend(), "c")
		parent := c.Request("q", "retry-count:0", []byte("fail"))
		child := c.Request("q", "after:"+parent, nil)
		grandchild := c.Request("q", "after:"+child, nil)
		anyway := c.Request("q", "after:"+parent+",after-failed:run", []byte("anyway"))
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(1)
		if ran := runAll(t, w, 2); !slices.Equal(ran, []string{parent, anyway}) {
			t.Fatalf("ran %v; want the parent, then the one that runs anyway", ran)
		}
		cancelled := map[string]string{}
		for len(cancelled) < 2 {
			evs, err := events.Next(ctx)
			if err != nil {
				t.Fatalf("events: %v (cancelled so far %v)", err, cancelled)
			}
			for _, e := range evs {
				if e.Kind == broker.EventCancelled {
					cancelled[e.MsgID] = e.Reason
				}
			}
		}
		if !strings.Contains(cancelled[child], parent) || !strings.Contains(cancelled[grandchild], child) {
			t.Fatalf("cancel reasons %v; want each naming its parent", cancelled)
		}
		for _, id := range []string{child, grandchild} {
			if j, _, err := b.Job(context.Background(), id); err != nil || j.State != store.Cancelled {
				t.Fatalf("%s: %+v, %v; want it kept cancelled", id, j, err)
			}
		}
	})
}

// Refused by name: bad workflow headers; a parent not stored; a parent
// dead (the job would be cancelled at once); a batch not known; a
// schedule that would wait. Nothing is stored.
func TestWorkflowRefusals(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	c := bt.Dial(t, b.Frontend(), "c")
	dead := c.Request("q", "retry-count:0", []byte("fail"))
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(1)
	runAll(t, w, 1)
	bt.Eventually(t, "the dead job", func() bool { return b.Stats().DeadLettered == 1 })
	for _, tc := range []struct{ headers, want string }{
		{"after:", "header after"},
		{"after-failed:maybe,after:" + dead, "header after-failed"},
		{"after-failed:run", "header after-failed"},
		{"batch-open", "header batch-open"},
		{"batch:" + strings.Repeat("b", 256), "header batch"},
		{"after:never-stored", "not stored"},
		{"after:" + dead, "dead"},
		{"after-batch:unknown", "batch"},
	} {
		h, err := emqp.ParseHeaders(tc.headers)
		if err != nil {
			t.Fatal(err)
		}
		id := emqp.NewID()
		c.Send(&emqp.Request{MsgID: id, Queue: "q", Headers: h})
		e, ok := c.Recv().(*emqp.Error)
		if !ok || e.Code != emqp.CodeBadRequest || !strings.Contains(e.Text, tc.want) {
			t.Errorf("headers %q: %+v; want ERROR bad_request naming %q", tc.headers, e, tc.want)
		}
		if _, _, err := b.Job(context.Background(), id); err == nil {
			t.Errorf("headers %q: the job was stored", tc.headers)
		}
	}
	c.Send(&emqp.Schedule{MsgID: emqp.NewID(), Queue: "q", Headers: mustHeaders(t, "after:"+dead), Interval: 60})
	if e, ok := c.Recv().(*emqp.Error); !ok || e.Code != emqp.CodeBadRequest {
		t.Errorf("a SCHEDULE with after: %+v; want ERROR bad_request", e)
	}
}

func mustHeaders(t testing.TB, s string) emqp.Headers {
	h, err := emqp.ParseHeaders(s)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// Waiting jobs are in the journal: after a restart, the parent done
// releases its child; a waiting job can be cancelled, and its parent's
// end then releases nothing.
func TestWorkflowAcrossARestart(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "c")
		parent := c.Request("q", "", nil)
		child := c.Request("q", "after:"+parent, nil)
		gone := c.Request("q", "after:"+parent, nil)
		if _, err := b.Cancel(context.Background(), gone, "admin"); err != nil {
			t.Fatalf("cancel of a waiting job: %v", err)
		}
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		b = start(nil)
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(2)
		if ran := runAll(t, w, 2); !slices.Equal(ran, []string{parent, child}) {
			t.Fatalf("ran %v", ran)
		}
		w.Sync() // a third job would come before the SYNC's answer
	})
}

// A running job adds a job to its own batch: the batch is not complete
// while it runs, so the new job counts, and the callback after the batch
// runs only once both are done.
func TestWorkflowRunningJobAddsToItsBatch(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "c")
		first := c.Request("q", "batch:b", nil)
		callback := c.Request("q", "after-batch:b", []byte("callback"))
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(1)
		if req := bt.Expect[*emqp.Request](w); req.MsgID != first {
			t.Fatalf("ran %s", req.MsgID)
		}
		added := c.Request("q", "batch:b", nil) // sent by the running job
		w.Reply(first, nil)
		w.Ready(1)
		if req := bt.Expect[*emqp.Request](w); req.MsgID != added {
			t.Fatalf("after the first: %s; want the job it added, not the callback", req.MsgID)
		}
		w.Reply(added, nil)
		w.Ready(1)
		if req := bt.Expect[*emqp.Request](w); req.MsgID != callback {
			t.Fatalf("after both: %s; want the callback", req.MsgID)
		}
	})
}
