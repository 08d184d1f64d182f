package broker_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

func why(t *testing.T, b *bt.Broker, msgid string) broker.Why {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	w, err := b.Why(ctx, msgid)
	if err != nil {
		t.Fatalf("why %s: %v", msgid, err)
	}
	if w.Sentence == "" || w.MsgID != msgid {
		t.Fatalf("why %s: no sentence, or another job: %+v", msgid, w)
	}
	return w
}

// expectWhy waits until the job's reason is want, and returns it.
func expectWhy(t *testing.T, b *bt.Broker, msgid, want string) broker.Why {
	t.Helper()
	var w broker.Why
	bt.Eventually(t, "reason "+want, func() bool { w = why(t, b, msgid); return w.Reason == want })
	return w
}

// Every state a job can be in has a reason that says why, in a sentence
// and in parts; an unknown msgid fails, naming it.
func TestWhyAJobWaits(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.ResultTTL = time.Hour })
	ctx := context.Background()
	c := bt.Dial(t, b.Frontend(), "c")

	if _, err := b.Why(ctx, "no-such-job"); !errors.Is(err, store.ErrNotFound) || !strings.Contains(err.Error(), "no-such-job") {
		t.Fatalf("an unknown msgid: %v, want not found naming it", err)
	}

	// Nobody serves the queue.
	lonely := c.Request("nobody", "", nil)
	expectWhy(t, b, lonely, broker.WhyNoWorker)

	// Delayed.
	later := c.Request("q", "delay:3600", nil)
	if w := expectWhy(t, b, later, broker.WhyDelayed); w.Until.Before(time.Now().Add(59 * time.Minute)) {
		t.Fatalf("delayed until %v, want about an hour from now", w.Until)
	}

	// Paused.
	change(t, b, "paused", broker.QueueChange{Paused: ptr(true)})
	p := c.Request("paused", "", nil)
	bt.Worker(t, b.Backend(), "wp", "paused").Ready(1)
	expectWhy(t, b, p, broker.WhyQueuePaused)

	// The queue's concurrency, and its rate.
	change(t, b, "qc", broker.QueueChange{Concurrency: ptr(1)})
	change(t, b, "qr", broker.QueueChange{Rate: ptr(0.001)})
	bt.Worker(t, b.Backend(), "wq", "qc,qr").Ready(10)
	c.Request("qc", "", nil)
	c.Request("qr", "", nil)
	expectWhy(t, b, c.Request("qc", "", nil), broker.WhyQueueConcurrency)
	if w := expectWhy(t, b, c.Request("qr", "", nil), broker.WhyQueueRate); !w.Until.After(time.Now().Add(time.Minute)) {
		t.Fatalf("queue rate: next room at %v, want about 1,000 s from now", w.Until)
	}

	// A tenant's concurrency (naming the job that holds it) and rate.
	change(t, b, "qt", broker.QueueChange{TenantConcurrency: ptr(1)})
	changeTenant(t, b, "qt", "slow", broker.TenantChange{Concurrency: ptr(0), Rate: ptr(0.001)})
	bt.Worker(t, b.Backend(), "wt", "qt").Ready(10)
	first := c.Request("qt", "tenant:acme", nil)
	w := expectWhy(t, b, c.Request("qt", "tenant:acme", nil), broker.WhyTenantConcurrency)
	if w.Tenant != "acme" || !slices.Equal(w.Holding, []string{first}) {
		t.Fatalf("tenant at its concurrency: %+v, want tenant acme held by %s", w, first)
	}
	c.Request("qt", "tenant:slow", nil)
	if w := expectWhy(t, b, c.Request("qt", "tenant:slow", nil), broker.WhyTenantRate); w.Tenant != "slow" || !w.Until.After(time.Now()) {
		t.Fatalf("tenant at its rate: %+v", w)
	}

	// A named limiter.
	setLimiter(t, b, "api", store.LimiterSettings{Concurrency: 1})
	bt.Worker(t, b.Backend(), "wl", "ql").Ready(10)
	c.Request("ql", "limit:api", nil)
	if w := expectWhy(t, b, c.Request("ql", "limit:api", nil), broker.WhyLimiterFull); w.Limiter != "api" {
		t.Fatalf("limiter full: %+v", w)
	}

	// Every slot busy, with what goes first; the job in flight.
	busy := bt.Worker(t, b.Backend(), "wb", "qb")
	busy.Ready(1)
	held := c.Request("qb", "", nil)
	j := recvJob(t, busy)
	if j.MsgID != held {
		t.Fatalf("the busy worker got %s, want %s", j.MsgID, held)
	}
	w = expectWhy(t, b, held, broker.WhyInFlight)
	if w.Worker != "wb" || w.Attempt != 1 || w.Since.IsZero() {
		t.Fatalf("in flight: %+v, want held by wb since a time, attempt 1", w)
	}
	c.Request("qb", "tenant:a", nil)
	c.Request("qb", "tenant:b", nil)
	last := c.Request("qb", "tenant:a", nil)
	w = expectWhy(t, b, last, broker.WhyWorkersBusy)
	if a := w.Ahead; a == nil || a.Tenant != 1 || a.Turns != 1 || a.Priority != 0 {
		t.Fatalf("every slot busy: %+v, want one of its tenant and one of another's turn ahead", w.Ahead)
	}

	// Done, kept with its result.
	busy.Reply(held, []byte("ok"))
	expectWhy(t, b, held, broker.WhyDone)

	// Dead.
	dw := bt.Worker(t, b.Backend(), "wd", "qd")
	dw.Ready(1)
	dead := c.Request("qd", "retry-count:0", nil)
	recvJob(t, dw)
	dw.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "boom"})
	if w := expectWhy(t, b, dead, broker.WhyDead); !strings.Contains(w.Error, "boom") {
		t.Fatalf("dead: %+v, want its last error", w)
	}

	// Cancelled.
	if _, err := b.Cancel(ctx, later, "test"); err != nil {
		t.Fatal(err)
	}
	expectWhy(t, b, later, broker.WhyCancelled)

	// Waiting for a parent, and for a batch.
	child := c.Request("q", "after:"+lonely, nil)
	w = expectWhy(t, b, child, broker.WhyWaitingParents)
	if len(w.Parents) != 1 || w.Parents[0].MsgID != lonely || w.Parents[0].State != store.Pending.String() {
		t.Fatalf("waiting for a parent: %+v", w.Parents)
	}
	if _, err := b.OpenBatch(ctx, "nightly", true); err != nil {
		t.Fatal(err)
	}
	if w := expectWhy(t, b, c.Request("q", "after-batch:nightly", nil), broker.WhyWaitingBatch); w.Batch != "nightly" {
		t.Fatalf("waiting for a batch: %+v", w)
	}
}

// A job held by a worker past OverdueAfter without a timeout is overdue:
// an event, a count, and Why says so; it runs on, and its REPLY completes
// it as any.
func TestOverdueJob(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.OverdueAfter = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	events, err := b.Listen(ctx, "q", "")
	if err != nil {
		t.Fatal(err)
	}
	c := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(2)
	slow := c.Request("q", "", nil)
	timed := c.Request("q", "timeout:3600", nil)
	recvJob(t, w)
	recvJob(t, w)
	bt.Eventually(t, "the job overdue", func() bool { return b.Stats().Overdue == 1 })
	if w := why(t, b, slow); w.Reason != broker.WhyInFlight || !w.Overdue || !strings.Contains(w.Sentence, "overdue") {
		t.Fatalf("why of an overdue job: %+v", w)
	}
	if w := why(t, b, timed); w.Overdue || w.Deadline.IsZero() {
		t.Fatalf("a job with a timeout is not overdue before its deadline: %+v", w)
	}
	for seen := false; !seen; {
		got, err := events.Next(ctx)
		if err != nil {
			t.Fatalf("no overdue event: %v", err)
		}
		for _, e := range got {
			if e.Kind == broker.EventOverdue {
				if e.MsgID != slow {
					t.Fatalf("overdue event for %s, want %s", e.MsgID, slow)
				}
				seen = true
			}
		}
	}
	w.Reply(slow, nil)
	bt.Eventually(t, "the overdue job done by its REPLY", func() bool { return b.Stats().Replied == 1 })
}

// A queue being moved between shards says so.
func TestWhyAQueueMoving(t *testing.T) {
	t.Parallel()
	shards, table := bt.StartShards(t, "s1", "s2")
	table.Queues["q"] = "s1"
	bt.SetShards(t, shards, table)
	c := bt.Dial(t, shards["s1"].Frontend(), "c")
	id := c.Request("q", "", nil)
	table.Moving = map[string]emqp.Move{"q": {From: "s1", To: "s2", Held: true}}
	bt.SetShards(t, shards, table)
	bt.Worker(t, shards["s1"].Backend(), "w", "q").Ready(1)
	expectWhy(t, shards["s1"], id, broker.WhyOtherShard)
}

// A named limiter at its rate names the time of its next room.
func TestWhyALimiterAtItsRate(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	setLimiter(t, b, "slow-api", store.LimiterSettings{Rate: 0.001})
	c := bt.Dial(t, b.Frontend(), "c")
	bt.Worker(t, b.Backend(), "w", "q").Ready(5)
	c.Request("q", "limit:slow-api", nil)
	w := expectWhy(t, b, c.Request("q", "limit:slow-api", nil), broker.WhyLimiterFull)
	if w.Limiter != "slow-api" || !w.Until.After(time.Now().Add(time.Minute)) {
		t.Fatalf("a limiter at its rate: %+v, want its next room about 1,000 s from now", w)
	}
}

// A job whose write is under way is being stored, not yet ACKed.
func TestWhyAJobBeingStored(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	dir := t.TempDir()
	b := bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return heldJournal{j, release} })
	})
	c := bt.Dial(t, b.Frontend(), "c")
	id := emqp.NewID()
	c.Send(&emqp.Request{MsgID: id, Queue: "q"})
	var w broker.Why
	bt.Eventually(t, "the job being stored", func() bool { // unknown until the REQUEST is read
		w, _ = b.Why(context.Background(), id)
		return w.Reason == broker.WhyStoring
	})
	if w.State != "journaling" || w.Sentence == "" {
		t.Fatalf("a job being stored: %+v", w)
	}
	close(release)
	if a := bt.Expect[*emqp.Ack](c); a.AckedID != id {
		t.Fatalf("ACK for %s, want %s", a.AckedID, id)
	}
	expectWhy(t, b, id, broker.WhyNoWorker)
}
