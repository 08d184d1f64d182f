package broker_test

import (
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// expectACKs receives n ACKs for msgid from p, then the ERROR of a Sync:
// no other answer came in between, and no more.
func expectACKs(t *testing.T, p *bt.Peer, msgid string, n int) {
	t.Helper()
	for range n {
		if ack := bt.Expect[*emqp.Ack](p); ack.AckedID != msgid {
			t.Fatalf("ACK for %s, want %s", ack.AckedID, msgid)
		}
	}
	p.Sync()
}

// Every REQUEST gets exactly one answer, whoever sends it and whatever
// state its job is in: a client that counts answers (one per REQUEST it
// sent) never waits for ever. Two REQUESTs with the same msgid sent back
// to back by one peer get two ACKs, and another peer's gets its own; the
// job is stored and run once.
func TestEveryRequestGetsOneAnswer(t *testing.T) {
	t.Parallel()
	// send sends req twice from a, back to back, and once from b.
	send := func(a, b *bt.Peer, req *emqp.Request) {
		a.Send(req)
		a.Send(req)
		b.Send(req)
	}

	t.Run("being written", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		dir := t.TempDir()
		b := bt.Start(t, dir, func(o *broker.Options) {
			fast(o)
			o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return heldJournal{j, release} })
		})
		a, other := bt.Dial(t, b.Frontend(), "a"), bt.Dial(t, b.Frontend(), "b")
		req := &emqp.Request{MsgID: emqp.NewID(), Queue: "q", Payload: []byte("once")}
		send(a, other, req)
		expectACKs(t, a, req.MsgID, 0) // handled, and not answered while the write is in progress
		expectACKs(t, other, req.MsgID, 0)
		close(release)
		expectACKs(t, a, req.MsgID, 2)
		expectACKs(t, other, req.MsgID, 1)
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(2)
		if got := bt.Expect[*emqp.Request](w); got.MsgID != req.MsgID {
			t.Fatalf("worker got %s", got.MsgID)
		}
		w.Sync() // no second delivery
		if d := b.Stats().Duplicates; d != 2 {
			t.Errorf("duplicates = %d, want 2", d)
		}
	})

	b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.ResultTTL = time.Hour })
	client := bt.Dial(t, b.Frontend(), "client")
	a, other := bt.Dial(t, b.Frontend(), "a"), bt.Dial(t, b.Frontend(), "b")
	worker := bt.Worker(t, b.Backend(), "w", "busy")
	stored := func(queue, headers string) *emqp.Request {
		h, err := emqp.ParseHeaders(headers)
		if err != nil {
			t.Fatal(err)
		}
		req := &emqp.Request{MsgID: emqp.NewID(), Queue: queue, Headers: h, Payload: []byte(queue)}
		client.Send(req)
		bt.Expect[*emqp.Ack](client)
		return req
	}
	states := []struct {
		name string
		make func() *emqp.Request
	}{
		{"pending", func() *emqp.Request { return stored("nobody", "") }},
		{"delayed", func() *emqp.Request { return stored("nobody", "delay:3600") }},
		{"in flight", func() *emqp.Request {
			req := stored("busy", "")
			worker.Ready(1)
			bt.Expect[*emqp.Request](worker)
			return req
		}},
		{"dead", func() *emqp.Request {
			req := stored("busy", "retry-count:0")
			worker.Ready(1)
			bt.Expect[*emqp.Request](worker)
			n := b.Stats().DeadLettered
			worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: req.MsgID, Reason: "no"})
			bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == n+1 })
			return req
		}},
		{"done, result kept", func() *emqp.Request {
			req := stored("busy", "")
			worker.Ready(1)
			bt.Expect[*emqp.Request](worker)
			n := b.Stats().Replied
			worker.Reply(req.MsgID, []byte("result"))
			bt.Eventually(t, "replied", func() bool { return b.Stats().Replied == n+1 })
			return req
		}},
	}
	for _, s := range states {
		t.Run(s.name, func(t *testing.T) {
			req := s.make()
			send(a, other, req)
			expectACKs(t, a, req.MsgID, 2)
			expectACKs(t, other, req.MsgID, 1)
		})
	}
	// None of them ran again.
	worker.Ready(1)
	worker.Sync()
	if d := b.Stats().Dispatched; d != 3 {
		t.Errorf("%d dispatches, want 3 (each job once)", d)
	}
}
