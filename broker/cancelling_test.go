package broker_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/boltstore"
)

func retainDone(o *broker.Options) { o.ResultTTL = time.Hour }

// cancelled checks that msgid is kept cancelled, never to run, with who
// cancelled it in its trail.
func cancelled(t *testing.T, b *bt.Broker, msgid, by string) {
	t.Helper()
	j, _, err := b.Job(context.Background(), msgid)
	if err != nil || j.State != store.Cancelled {
		t.Fatalf("job %s after its cancel: %+v, %v; want it kept cancelled", msgid, j, err)
	}
	last := j.Trail[len(j.Trail)-1]
	if last.Kind != broker.EventCancelled || last.Reason != "cancelled by "+by {
		t.Fatalf("job %s: last trail event %+v; want cancelled by %s", msgid, last, by)
	}
}

// A job is cancelled in every state the broker holds it: pending and
// delayed ones leave their queue at once; one in flight is no longer its
// worker's, which gets CANCEL, and whose REPLY after it is ignored (the
// client that asked for it gets none). Each is kept cancelled (with
// retain-done), never retried, also across a restart. A done, dead,
// cancelled or unknown job is refused, nothing changed.
func TestCancelInEveryState(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(retainDone)
		ctx := context.Background()
		events, err := b.Listen(ctx, "", "")
		if err != nil {
			t.Fatal(err)
		}
		defer events.Close()
		client := bt.Dial(t, b.Frontend(), "c")
		running := client.Request("q", "reply-requested", []byte("r"))
		pending := client.Request("q", "", []byte("p"))
		delayed := client.Request("q", "delay:3600", []byte("d"))
		next := client.Request("q", "", []byte("n"))
		done := client.Request("q", "", nil)
		dead := client.Request("dying", "retry-count:0", nil)

		w := bt.Worker(t, b.Backend(), "w", "q,dying")
		w.Ready(1)
		if req := bt.Expect[*emqp.Request](w); req.MsgID != running {
			t.Fatalf("first job given: %s", req.MsgID)
		}
		for _, id := range []string{running, pending, delayed} {
			if _, err := b.Cancel(ctx, id, "admin"); err != nil {
				t.Fatalf("cancel %s: %v", id, err)
			}
		}
		if c := bt.Expect[*emqp.Cancel](w); c.OrigMsgID != running {
			t.Fatalf("CANCEL for %s; want the running %s", c.OrigMsgID, running)
		}
		ignored := b.Stats().Ignored
		w.Reply(running, []byte("too late")) // ignored: the job is cancelled
		w.Sync()
		if b.Stats().Ignored < ignored+1 {
			t.Error("the REPLY after the cancel was not ignored")
		}
		// The next job is the one behind them; the done and dead ones end.
		w.Ready(3)
		for range 3 {
			req := bt.Expect[*emqp.Request](w)
			switch req.MsgID {
			case next, done:
				w.Reply(req.MsgID, nil)
			case dead:
				w.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: dead, Reason: "no"})
			default:
				t.Fatalf("a job given after the cancels: %s", req.MsgID)
			}
		}
		w.Sync()
		bt.Eventually(t, "the dying job dead", func() bool { return b.Stats().DeadLettered == 1 })
		if m, ok := client.TryRecv(0); ok {
			if r, isReply := m.(*emqp.Reply); isReply && r.OrigMsgID == running {
				t.Fatal("the client got the REPLY of its cancelled job")
			}
		}
		for _, id := range []string{running, pending, delayed} {
			cancelled(t, b, id, "admin")
		}
		if got := b.Stats().Cancelled; got != 3 {
			t.Errorf("cancelled counted %d; want 3", got)
		}
		bt.Eventually(t, "done and dead stored", func() bool {
			j, _, err := b.Job(ctx, done)
			d, _, derr := b.Job(ctx, dead)
			return err == nil && derr == nil && j.State == store.Done && d.State == store.Dead
		})

		for id, want := range map[string]error{done: store.ErrWrongState, dead: store.ErrWrongState,
			pending: store.ErrWrongState, "unknown": store.ErrNotFound} {
			if _, err := b.Cancel(ctx, id, "admin"); !errors.Is(err, want) {
				t.Errorf("cancel of %s: %v; want %v", id, err, want)
			}
		}
		seen := map[string]bool{}
		bt.Eventually(t, "an event for each cancel", func() bool {
			es, err := events.Next(ctx)
			for _, e := range es {
				if e.Kind == broker.EventCancelled {
					seen[e.MsgID] = true
				}
			}
			return err == nil && len(seen) == 3
		})

		client.Close()
		w.Close()
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		b = start(retainDone)
		w = bt.Worker(t, b.Backend(), "w2", "q")
		w.Ready(5)
		w.Sync() // nothing is left to run: a job would come before this answer
		cancelled(t, b, delayed, "admin")
	})
}

// A client cancels over eMQP: ACK once done, ERROR conflict for a job
// cancelled (or done, dead) already, not_found for one never stored.
func TestClientCancels(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", chain(fast, retainDone))
	client := bt.Dial(t, b.Frontend(), "c")
	id := client.Request("q", "", nil)
	ask := func(msgid string) emqp.Message {
		m := &emqp.Cancel{MsgID: emqp.NewID(), OrigMsgID: msgid}
		client.Send(m)
		answer := client.Recv()
		if a, ok := answer.(*emqp.Ack); ok && a.AckedID != m.MsgID {
			t.Fatalf("ACK of %s; want the CANCEL's %s", a.AckedID, m.MsgID)
		}
		if e, ok := answer.(*emqp.Error); ok && e.RefMsgID != m.MsgID {
			t.Fatalf("ERROR for %s; want the CANCEL's %s", e.RefMsgID, m.MsgID)
		}
		return answer
	}
	if m, ok := ask(id).(*emqp.Ack); !ok {
		t.Fatalf("CANCEL of a pending job: %+v", m)
	}
	cancelled(t, b, id, "client c")
	if e, ok := ask(id).(*emqp.Error); !ok || e.Code != emqp.CodeConflict {
		t.Fatalf("CANCEL again: %+v; want ERROR conflict", e)
	}
	if e, ok := ask("never-sent").(*emqp.Error); !ok || e.Code != emqp.CodeNotFound {
		t.Fatalf("CANCEL of an unknown job: %+v; want ERROR not_found", e)
	}
}

// A job cancelled while its write is in progress is ACKed when it lands
// (it was stored), and never dispatched.
func TestCancelWhileJournaling(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	dir := t.TempDir()
	b := bt.Start(t, dir, chain(fast, retainDone, func(o *broker.Options) {
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return heldJournal{j, release} })
	}))
	client := bt.Dial(t, b.Frontend(), "c")
	id := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id, Queue: "q"})
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(1)
	bt.Eventually(t, "the job stored, its ACK held back", func() bool {
		_, _, err := b.Job(context.Background(), id)
		return err == nil
	})
	if _, err := b.Cancel(context.Background(), id, "admin"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	close(release)
	if ack := bt.Expect[*emqp.Ack](client); ack.AckedID != id {
		t.Fatalf("ACK of %s", ack.AckedID)
	}
	w.Sync() // the job would come before this answer
	cancelled(t, b, id, "admin")
}

// Bulk cancel: the jobs named are cancelled, their writes at once; one
// gone meanwhile is skipped.
func TestCancelJobs(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	client := bt.Dial(t, b.Frontend(), "c")
	var ids []string
	for range 50 {
		ids = append(ids, client.Request("q", "", nil))
	}
	n, err := b.CancelJobs(context.Background(), append(ids, "gone"), "admin")
	if err != nil || n != 50 {
		t.Fatalf("CancelJobs: %d, %v; want 50", n, err)
	}
	if p := pendingOf(t, b, "q"); p != 0 {
		t.Fatalf("%d jobs left", p)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	j, err := boltstore.Open(filepath.Join(b.Dir, broker.JournalFile), boltstore.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if c, _ := j.Counts(); len(c) != 0 {
		t.Fatalf("stored after the cancels, without retain-done: %+v; want nothing", c)
	}
}

// A worker's PROGRESS of a job it holds is kept (the latest), shown, and
// an event; from another peer, or after the REPLY, it is ignored.
func TestProgressOfAJobInFlight(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	ctx := context.Background()
	events, err := b.Listen(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	defer events.Close()
	client := bt.Dial(t, b.Frontend(), "c")
	id := client.Request("q", "", nil)
	w := bt.Worker(t, b.Backend(), "w", "q")
	other := bt.Worker(t, b.Backend(), "other", "q")
	w.Ready(1)
	bt.Expect[*emqp.Request](w)
	if p, err := b.JobProgress(ctx, id); err != nil || p != nil {
		t.Fatalf("progress before any: %+v, %v", p, err)
	}
	progress := func(p *bt.Peer, text string) {
		p.Send(&emqp.Progress{MsgID: emqp.NewID(), OrigMsgID: id, Text: text})
		p.Sync()
	}
	progress(w, "10 starting")
	progress(w, "40 resizing")
	ignored := b.Stats().Ignored
	progress(other, "99 not mine")
	if b.Stats().Ignored != ignored+1 {
		t.Error("a PROGRESS from a peer not holding the job was not ignored")
	}
	p, err := b.JobProgress(ctx, id)
	if err != nil || p == nil || p.Percent != 40 || p.Note != "resizing" || p.Worker != "backend/w" {
		t.Fatalf("progress: %+v, %v; want 40 resizing from backend/w", p, err)
	}
	var texts []string
	bt.Eventually(t, "a progress event", func() bool {
		es, _ := events.Next(ctx)
		for _, e := range es {
			if e.Kind == broker.EventProgress && e.MsgID == id {
				texts = append(texts, e.Reason)
			}
		}
		return len(texts) > 0
	})
	if texts[0] != "10 starting" {
		t.Errorf("first progress event %q", texts[0])
	}
	w.Reply(id, nil)
	progress(w, "100 done")
	if p, err := b.JobProgress(ctx, id); err != nil || p != nil {
		t.Fatalf("progress after the REPLY: %+v, %v; want none", p, err)
	}
	if !strings.HasPrefix(p.Worker, "backend/") {
		t.Errorf("worker %q", p.Worker)
	}
}
