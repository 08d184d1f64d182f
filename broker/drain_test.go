package broker_test

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// drainFixture is a broker with a slow worker holding one job (its client
// asked for the REPLY) and one more job pending behind it.
func drainFixture(t *testing.T, drainTimeout time.Duration) (b *bt.Broker, client, slow *bt.Peer, inflight, pending string) {
	t.Helper()
	b = bt.StartAdmin(t, "", func(o *broker.Options) {
		fast(o)
		o.DrainTimeout = drainTimeout
	}, nil)
	client = bt.Dial(t, b.Frontend(), "c")
	slow = bt.Worker(t, b.Backend(), "slow", "q")
	slow.Ready(1)
	inflight = client.Request("q", "reply-requested", []byte("running"))
	bt.Expect[*emqp.Request](slow)
	pending = client.Request("q", "", []byte("waiting"))
	return
}

// stopped returns Drain's outcome as a channel.
func stopped(b *bt.Broker) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- b.Drain() }()
	return ch
}

// A stopping broker takes no more work but lets the job in flight finish:
// /readyz says no, REQUESTs get ERROR unavailable, a free slot gets
// nothing, the admin API still answers; the slow worker's REPLY completes
// its job and reaches the client, and only then does the broker stop.
func TestDrainWaitsForJobsInFlight(t *testing.T) {
	t.Parallel()
	b, client, slow, inflight, pending := drainFixture(t, time.Hour)
	done := stopped(b)
	bt.Eventually(t, "/readyz says not ready", func() bool { return bt.API(t, b, "GET", "/readyz", "", nil) == http.StatusServiceUnavailable })

	id := emqp.NewID()
	client.Send(&emqp.Request{MsgID: id, Queue: "q"})
	if e := bt.Expect[*emqp.Error](client); e.Code != emqp.CodeUnavailable || e.RefMsgID != id {
		t.Fatalf("REQUEST while draining: ERROR %+v, want unavailable for %s", e, id)
	}
	slow.Ready(1)
	slow.Sync() // the answer to SYNC comes first: the free slot got no job
	if code := bt.API(t, b, "GET", "/api/v1/workers", "", nil); code != http.StatusOK {
		t.Fatalf("admin API while draining: %d", code)
	}
	select {
	case err := <-done:
		t.Fatalf("the broker stopped (%v) with a job in flight", err)
	default:
	}

	slow.Reply(inflight, []byte("finished"))
	if r := bt.Expect[*emqp.Reply](client); r.OrigMsgID != inflight || string(r.Payload) != "finished" {
		t.Fatalf("client got REPLY %+v, want the slow job's", r)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(bt.Wait):
		t.Fatal("the broker did not stop once nothing was in flight")
	}
	if m := bt.Expect[*emqp.Kbye](slow); m == nil {
		t.Fatal("no KBYE")
	}
	j := b.Journal(t)
	if _, err := j.Get(inflight); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the drained job is still stored: %v", err)
	}
	if _, err := j.Get(pending); err != nil {
		t.Errorf("the pending job was not kept: %v", err)
	}
}

// A drain ends at DrainTimeout, or at once with Shutdown (a second
// signal); what is still in flight stays journaled for the next start.
func TestDrainEnds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		timeout time.Duration
		cut     bool
	}{{"at the drain timeout", 200 * time.Millisecond, false}, {"at Shutdown", time.Hour, true}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b, _, slow, inflight, _ := drainFixture(t, c.timeout)
			done := stopped(b)
			bt.Eventually(t, "draining", func() bool { return bt.API(t, b, "GET", "/readyz", "", nil) == http.StatusServiceUnavailable })
			if c.cut {
				go b.Close()
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(bt.Wait):
				t.Fatal("the drain did not end")
			}
			bt.Expect[*emqp.Kbye](slow)
			if j, err := b.Journal(t).Get(inflight); err != nil || j.Attempts != 0 {
				t.Fatalf("the job in flight at the stop: %+v, %v; want it stored, no attempt counted", j, err)
			}
		})
	}
}

// A broker whose journal is fenced off stops serving at once: the write
// that found out is refused (ERROR, never ACK), the workers are told
// goodbye, Run returns the error, and nothing stored is lost.
func TestFencedJournalStopsTheBroker(t *testing.T) {
	t.Parallel()
	for _, by := range []string{"REQUEST", "REPLY"} {
		t.Run("found by a "+by, func(t *testing.T) {
			t.Parallel()
			dir, fence := t.TempDir(), make(chan struct{})
			b := bt.Start(t, dir, func(o *broker.Options) {
				fast(o)
				o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return fencingJournal{j, fence} })
			})
			client := bt.Dial(t, b.Frontend(), "c")
			worker := bt.Worker(t, b.Backend(), "w", "q")
			worker.Ready(1)
			held := client.Request("q", "", nil)
			bt.Expect[*emqp.Request](worker)
			close(fence)
			if by == "REQUEST" {
				id := emqp.NewID()
				client.Send(&emqp.Request{MsgID: id, Queue: "q"})
				if e := bt.Expect[*emqp.Error](client); e.Code != emqp.CodeUnavailable || e.RefMsgID != id {
					t.Fatalf("REQUEST to a fenced broker: %+v, want ERROR unavailable", e)
				}
			} else {
				worker.Reply(held, nil)
			}
			bt.Expect[*emqp.Kbye](worker)
			if err := b.Stop(); !errors.Is(err, store.ErrFenced) {
				t.Fatalf("Run returned %v, want ErrFenced", err)
			}
			if _, err := b.Journal(t).Get(held); err != nil {
				t.Fatalf("the job held at the fence: %v", err)
			}
		})
	}
}
