package broker_test

import (
	"bytes"
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
			bt.Eventually(t, "20 replied", func() bool { return b.Stats().Replied.Load() == 20 })
			if err := b.Stop(); err != nil {
				t.Fatal(err)
			}
			b2 := bt.Start(t, b.Dir, func(o *broker.Options) { fast(o); o.PayloadCache = cache })
			receive(b2, 20) // the other 20 were in flight at the stop
		})
	}
}

// failingReads fails the payload reads of one msgid until it has failed
// twice, as a flaky disk does.
type failingReads struct {
	store.Journal
	msgid  string
	failed atomic.Int32
}

func (f *failingReads) Payloads(msgids []string, fn func(int, []byte, error)) error {
	return f.Journal.Payloads(msgids, func(i int, p []byte, err error) {
		if msgids[i] == f.msgid && f.failed.Add(1) <= 2 {
			fn(i, nil, fmt.Errorf("read %s: input/output error", msgids[i]))
			return
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
		o.OpenJournal = wrapJournal(dir, func(j store.Journal) store.Journal { fr.Journal = j; return fr })
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
