package broker_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store"
)

// An admin's purge or remove of a job whose write is in progress: the
// journal stores it and then deletes it (writes apply in order), so the
// broker must not dispatch it. The client gets its ACK (it was stored).
func TestRemoveWhileBeingWritten(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"purge", "remove"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			release, dir := make(chan struct{}), t.TempDir()
			b := bt.Start(t, dir, func(o *broker.Options) {
				fast(o)
				o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return heldJournal{j, release} })
			})
			client := bt.Dial(t, b.Frontend(), "c")
			id := emqp.NewID()
			client.Send(&emqp.Request{MsgID: id, Queue: "q"})
			client.Sync() // handled: its write is in progress
			done := make(chan error, 1)
			go func() {
				if how == "purge" {
					n, err := b.PurgeQueue(context.Background(), "q")
					if err == nil && n != 1 {
						err = errors.New("the purge did not count the job")
					}
					done <- err
					return
				}
				done <- b.RemoveJob(context.Background(), id)
			}()
			close(release)
			if err := testutil.Recv(t, done, how+"'s outcome"); err != nil {
				t.Fatal(err)
			}
			if ack := bt.Expect[*emqp.Ack](client); ack.AckedID != id {
				t.Fatalf("ACK for %s, want %s", ack.AckedID, id)
			}
			w := bt.Worker(t, b.Backend(), "w", "q")
			w.Ready(1)
			w.Sync() // the SYNC's answer comes first: no job was dispatched
			if _, err := b.Journal(t).Get(id); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("the removed job: %v, want ErrNotFound", err)
			}
		})
	}
}

// reviveFirst holds a Revive's outcome until the next Append has been
// made and its outcome too, then reports both in that order: an admin's
// retry of a dead job lands while a resend of its msgid waits.
type reviveFirst struct {
	store.Journal
	armed         atomic.Bool
	revived, sent chan struct{}
	reported      chan struct{}
	once          sync.Once
}

func (r *reviveFirst) Revive(msgid string, trail []store.TrailEvent, done func(*store.Job, error)) {
	r.Journal.Revive(msgid, trail, func(sj *store.Job, err error) {
		go func() { <-r.sent; done(sj, err); close(r.reported) }()
	})
	close(r.revived)
}

func (r *reviveFirst) Append(j *store.Job, done func(bool, error)) {
	if !r.armed.Load() {
		r.Journal.Append(j, done)
		return
	}
	r.Journal.Append(j, func(dup bool, err error) { go func() { <-r.reported; done(dup, err) }() })
	r.once.Do(func() { close(r.sent) })
}

// A dead job retried while a client sends its msgid again: the revived
// job is the one the broker holds (the resend is a duplicate), so an
// admin's remove reaches it and no worker gets it after.
func TestRetryRacingAResend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	rj := &reviveFirst{revived: make(chan struct{}), sent: make(chan struct{}), reported: make(chan struct{})}
	b := bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { rj.Journal = j; return rj })
	})
	client := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	id := buryOne(t, b, client, w)

	rj.armed.Store(true)
	retried := make(chan error, 1)
	go func() { retried <- b.RetryDead(context.Background(), id) }()
	testutil.Recv(t, rj.revived, "the revive")
	client.Send(&emqp.Request{MsgID: id, Queue: "q"})
	if err := testutil.Recv(t, retried, "RetryDead's outcome"); err != nil {
		t.Fatal(err)
	}
	bt.Expect[*emqp.Ack](client)
	if err := b.RemoveJob(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	w.Ready(1)
	w.Sync() // the SYNC's answer comes first: the removed job was not dispatched
}

// heldRevive holds a Revive's outcome until release is closed.
type heldRevive struct {
	store.Journal
	called, release chan struct{}
}

func (h heldRevive) Revive(msgid string, trail []store.TrailEvent, done func(*store.Job, error)) {
	h.Journal.Revive(msgid, trail, func(sj *store.Job, err error) { go func() { <-h.release; done(sj, err) }() })
	close(h.called)
}

// RetryDead returns once the journal has revived the job, even when the
// broker stopped meanwhile: a caller without a deadline does not hang.
func TestRetryDeadReturnsAfterTheStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	hr := heldRevive{called: make(chan struct{}), release: make(chan struct{})}
	b := bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { hr.Journal = j; return hr })
	})
	client := bt.Dial(t, b.Frontend(), "c")
	w := bt.Worker(t, b.Backend(), "w", "q")
	id := buryOne(t, b, client, w)

	retried := make(chan error, 1)
	go func() { retried <- b.RetryDead(context.Background(), id) }()
	testutil.Recv(t, hr.called, "the revive asked of the journal")
	stopped := make(chan error, 1)
	go func() { stopped <- b.Stop() }()
	bt.Eventually(t, "the loop stopped", func() bool {
		_, err := b.Queues(context.Background())
		return errors.Is(err, broker.ErrStopped)
	})
	close(hr.release)
	if err := testutil.RecvWithin(t, time.Minute, stopped, "the stop's end"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, retried, "RetryDead's outcome after the stop"); err != nil {
		t.Fatalf("RetryDead: %v", err)
	}
	if j, err := b.Journal(t).Get(id); err != nil || j.State != store.Pending {
		t.Fatalf("the retried job: %+v, %v; want it pending, for the next start", j, err)
	}
}

// buryOne has client send a job with no retries to queue q, and worker
// (serving q) take and FAIL it; it returns once the job is dead.
func buryOne(t *testing.T, b *bt.Broker, client, worker *bt.Peer) string {
	t.Helper()
	dead := b.Stats().DeadLettered
	id := client.Request("q", "retry-count:0", nil)
	worker.Ready(1)
	if got := bt.Expect[*emqp.Request](worker); got.MsgID != id {
		t.Fatalf("worker got %s, want %s", got.MsgID, id)
	}
	worker.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: id, Reason: "boom"})
	bt.Eventually(t, "dead-lettered", func() bool { return b.Stats().DeadLettered == dead+1 })
	return id
}
