package broker_test

import (
	"bytes"
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// Payloads are read from the journal when the cache does not hold them:
// with no cache, a small one or the default, a worker gets every job's
// payload byte for byte, in FIFO order, before and after a restart.
func TestPayloadsComeFromTheJournal(t *testing.T) {
	t.Parallel()
	for _, cache := range []int64{0, 6000, broker.DefaultOptions().PayloadCache} {
		t.Run(fmt.Sprint("cache=", cache), func(t *testing.T) {
			t.Parallel()
			b := bt.Start(t, "", func(o *broker.Options) { fast(o); o.PayloadCache = cache })
			client := bt.Dial(t, b.Frontend(), "c")
			var ids []string
			var payloads [][]byte
			for i := range 40 {
				p := bytes.Repeat([]byte{byte(i), 0, 0xff}, []int{0, 1, 40, 2000}[i%4])
				ids = append(ids, client.Request("q", "", p))
				payloads = append(payloads, p)
			}
			receive := func(b *bt.Broker, from int) {
				w := bt.Worker(t, b.Backend(), "w", "q")
				w.Ready(len(ids) - from)
				for i := from; i < len(ids); i++ {
					got := bt.Expect[*emqp.Request](w)
					if got.MsgID != ids[i] || !bytes.Equal(got.Payload, payloads[i]) {
						t.Fatalf("job %d: %s with %d bytes, want %s with %d", i, got.MsgID, len(got.Payload), ids[i], len(payloads[i]))
					}
					if i < 20 {
						w.Reply(got.MsgID, nil)
					}
				}
			}
			receive(b, 0)
			bt.Eventually(t, "20 replied", func() bool { return b.Stats().Replied == 20 })
			if err := b.Stop(); err != nil {
				t.Fatal(err)
			}
			b2 := bt.Start(t, b.Dir, func(o *broker.Options) { fast(o); o.PayloadCache = cache })
			receive(b2, 20) // the other 20 were in flight at the stop
		})
	}
}

// failingReads fails the payload reads of one msgid until it has failed
// twice, as a flaky disk does; with corrupt, every time, as a damaged
// record does.
type failingReads struct {
	store.Journal
	msgid   string
	corrupt bool
	failed  atomic.Int32
}

func (f *failingReads) Payloads(msgids []string, fn func(int, []byte, error)) error {
	return f.Journal.Payloads(msgids, func(i int, p []byte, err error) {
		switch {
		case msgids[i] != f.msgid:
		case f.corrupt:
			f.failed.Add(1)
			err = fmt.Errorf("%w: the record of job %q is truncated", store.ErrCorrupt, msgids[i])
		case f.failed.Add(1) <= 2:
			err = fmt.Errorf("read %s: input/output error", msgids[i])
		}
		if err != nil {
			p = nil
		}
		fn(i, p, err)
	})
}

// A payload that cannot be read leaves its job stored and pending: the
// jobs around it go out, it is tried again later and goes out too, with no
// attempt counted.
func TestPayloadReadFailureLosesNothing(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fr := &failingReads{}
	b := bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.PayloadCache = 0
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { fr.Journal = j; return fr })
	})
	client := bt.Dial(t, b.Frontend(), "c")
	first := client.Request("q", "", []byte("first"))
	fr.msgid = client.Request("q", "", []byte("flaky"))
	last := client.Request("q", "", []byte("last"))
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(3)
	got := map[string]string{}
	for range 3 {
		r := bt.Expect[*emqp.Request](w)
		if _, again := got[r.MsgID]; again {
			t.Fatalf("%s dispatched twice", r.MsgID)
		}
		got[r.MsgID] = string(r.Payload)
		if _, ok := r.Headers.Get(broker.HeaderAttempt); ok {
			t.Errorf("%s came with %s: a read failure counted as an attempt", r.MsgID, r.Headers)
		}
	}
	want := map[string]string{first: "first", fr.msgid: "flaky", last: "last"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("worker got %v, want %v", got, want)
	}
	if n := fr.failed.Load(); n < 3 {
		t.Fatalf("the flaky payload was read %d times, want 2 failures and a success", n)
	}
}

// A job whose record is damaged is not read again and again: the broker
// stops dispatching it, and leaves it in the journal for an operator. The
// jobs around it go out.
func TestDamagedRecordIsLeftInTheJournal(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fr := &failingReads{corrupt: true}
	b := bt.Start(t, dir, func(o *broker.Options) {
		fast(o)
		o.PayloadCache = 0
		o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { fr.Journal = j; return fr })
	})
	client := bt.Dial(t, b.Frontend(), "c")
	fr.msgid = client.Request("q", "", []byte("damaged"))
	fine := client.Request("q", "", []byte("fine"))
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(2)
	if r := bt.Expect[*emqp.Request](w); r.MsgID != fine {
		t.Fatalf("worker got %s, want the undamaged job %s", r.MsgID, fine)
	}
	bt.Eventually(t, "the damaged job no longer held", func() bool {
		qs, err := b.Queues(t.Context())
		return err == nil && len(qs) == 1 && qs[0].Pending+qs[0].Delayed+qs[0].InFlight == 1 // the fine one, in flight
	})
	if n := fr.failed.Load(); n != 1 {
		t.Fatalf("the damaged record was read %d times, want once", n)
	}
	if _, err := storedJob(t, b, fr.msgid); err != nil {
		t.Fatalf("the damaged job is not in the journal: %v", err)
	}
}

// The payload cache holds at most --payload-cache bytes, and nothing once
// the jobs it held are dispatched, whether their payloads came from it or
// from the journal.
func TestPayloadCacheStaysWithinItsBound(t *testing.T) {
	t.Parallel()
	const cache = 64 << 10 // a payload of 4 KiB at most
	b := bt.StartAdmin(t, "", func(o *broker.Options) { fast(o); o.PayloadCache = cache }, nil)
	client := bt.Dial(t, b.Frontend(), "c")
	p := bytes.Repeat([]byte{'x'}, 4000)
	for range 40 { // 16 cached, 24 not
		client.Request("q", "", p)
	}
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(40)
	for range 40 {
		r := bt.Expect[*emqp.Request](w)
		w.Reply(r.MsgID, nil)
	}
	w.Sync()
	if got := bt.MetricValue(t, bt.ScrapeMetrics(t, b), "emq_payload_cache_bytes", ""); got != 0 {
		t.Fatalf("payload cache holds %v bytes after every job was dispatched", got)
	}
	for range 40 {
		client.Request("idle", "", p)
	}
	if got := bt.MetricValue(t, bt.ScrapeMetrics(t, b), "emq_payload_cache_bytes", ""); got != 16*4000 {
		t.Fatalf("payload cache holds %v bytes for 40 jobs of 4,000 bytes; want 16 of them, %d", got, 16*4000)
	}
}

// gatedReads holds every payload read until open is closed.
type gatedReads struct {
	store.Journal
	open chan struct{}
}

func (g gatedReads) Payloads(msgids []string, fn func(int, []byte, error)) error {
	<-g.open
	return g.Journal.Payloads(msgids, fn)
}

// A job taken back while its payload is being read (an admin removed it,
// or purged its queue) gives its worker's slot back: the worker never saw
// the job, and does not offer that slot again. The next job reaches the
// worker.
func TestSlotComesBackWhenAJobIsTakenBackUnsent(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"remove", "purge"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			dir, open := t.TempDir(), make(chan struct{})
			b := bt.StartAdmin(t, dir, func(o *broker.Options) {
				fast(o)
				o.PayloadCache = 0
				o.OpenJournal = bt.WrapJournal(dir, func(j store.Journal) store.Journal { return gatedReads{j, open} })
			}, nil)
			client := bt.Dial(t, b.Frontend(), "c")
			first := client.Request("q", "", []byte("first"))
			w := bt.Worker(t, b.Backend(), "w", "q")
			w.Ready(1)
			bt.Eventually(t, "the job given out", func() bool {
				return bt.MetricValue(t, bt.ScrapeMetrics(t, b), "emq_queue_inflight_jobs", "q") == 1
			})
			var err error
			if how == "remove" {
				err = b.RemoveJob(context.Background(), first)
			} else {
				_, err = b.PurgeQueue(context.Background(), "q")
			}
			if err != nil {
				t.Fatal(err)
			}
			want := client.Request("q", "", []byte("second"))
			close(open)
			if r := bt.Expect[*emqp.Request](w); r.MsgID != want {
				t.Fatalf("worker got %s, want %s", r.MsgID, want)
			}
		})
	}
}
