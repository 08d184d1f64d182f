package broker_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

// newBulk is a BULK of n jobs of queue, job i with headers[i] (if any)
// and payload "p<i>".
func newBulk(t *testing.T, queue string, n int, headers map[int]string) *emqp.Bulk {
	t.Helper()
	m := &emqp.Bulk{MsgID: emqp.NewID(), Jobs: make([]emqp.BulkJob, n)}
	for i := range m.Jobs {
		h, err := emqp.ParseHeaders(headers[i])
		if err != nil {
			t.Fatal(err)
		}
		m.Jobs[i] = emqp.BulkJob{MsgID: emqp.NewID(), Queue: queue, Headers: h, Payload: fmt.Appendf(nil, "p%d", i)}
	}
	return m
}

// expectBulkRefused receives the ERROR of bulk m and checks that it names
// job index with code.
func expectBulkRefused(t *testing.T, p *bt.Peer, m *emqp.Bulk, index int, code string) *emqp.Error {
	t.Helper()
	e := bt.Expect[*emqp.Error](p)
	i, id, _, ok := emqp.BulkJobOf(e.Text)
	if e.RefMsgID != m.MsgID || e.Code != code || !ok || i != index || id != m.Jobs[index].MsgID {
		t.Fatalf("ERROR %+v; want %s for bulk %s naming job %d (%s)", e, code, m.MsgID, index, m.Jobs[index].MsgID)
	}
	return e
}

// storedIDs is the msgids the journal holds pending, in its order.
func storedIDs(t *testing.T, b *bt.Broker, queue string) []string {
	t.Helper()
	var ids []string
	for after := ""; ; {
		page, err := b.List(store.ListOptions{Queue: queue, After: after, NoPayloads: true})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			ids = append(ids, j.MsgID)
		}
		if after = page.Next; after == "" {
			return ids
		}
	}
}

// One bad job refuses the whole BULK, named; the bulk corrected is
// stored whole, and a worker gets its jobs in their order.
func TestBulkAllOrNothing(t *testing.T) {
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "")
		m := newBulk(t, "q", 10, map[int]string{3: "priority:7", 7: "timeout:soon"})
		c.Send(m)
		e := expectBulkRefused(t, c, m, 7, emqp.CodeBadRequest)
		if !strings.Contains(e.Text, "timeout") {
			t.Fatalf("the refusal %q does not say what is wrong", e.Text)
		}
		c.Request("other", "", nil) // writes land in order: any of the bulk's has
		if ids := storedIDs(t, b, "q"); len(ids) != 0 {
			t.Fatalf("a refused BULK stored %d jobs", len(ids))
		}
		h, _ := emqp.ParseHeaders("timeout:30")
		m.Jobs[7].Headers = h
		c.Send(m)
		expectAck(t, c, m.MsgID)
		want := make([]string, len(m.Jobs))
		for i, j := range m.Jobs {
			want[i] = j.MsgID
		}
		if ids := storedIDs(t, b, "q"); strings.Join(ids, ",") != strings.Join(want, ",") {
			t.Fatalf("stored %v, want the bulk's jobs %v", ids, want)
		}
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(len(m.Jobs))
		for i := range m.Jobs {
			want := i
			if i == 0 { // job 3's priority 7 runs before the others' 1024
				want = 3
			} else if i <= 3 {
				want = i - 1
			}
			r := bt.Expect[*emqp.Request](w)
			if r.MsgID != m.Jobs[want].MsgID || string(r.Payload) != fmt.Sprint("p", want) {
				t.Fatalf("delivery %d: job %s %q, want job %d", i, r.MsgID, r.Payload, want)
			}
		}
	})
}

// A BULK sent again stores nothing twice and is ACKed, whether its jobs
// are pending, dispatched or being stored; a REQUEST for one of its jobs
// is ACKed too.
func TestBulkSentAgain(t *testing.T) {
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "")
		m := newBulk(t, "q", 50, nil)
		c.Send(m)
		c.Send(m) // while the first is being written, as often as not
		expectAck(t, c, m.MsgID)
		expectAck(t, c, m.MsgID)
		c.Send(m.Request(4))
		expectAck(t, c, m.Jobs[4].MsgID)
		c.Send(m) // every job pending
		expectAck(t, c, m.MsgID)
		if ids := storedIDs(t, b, "q"); len(ids) != len(m.Jobs) {
			t.Fatalf("stored %d jobs, want %d once each", len(ids), len(m.Jobs))
		}
		more := newBulk(t, "q", 3, nil) // two jobs stored before, one new
		more.Jobs[0], more.Jobs[1] = m.Jobs[10], m.Jobs[20]
		c.Send(more)
		expectAck(t, c, more.MsgID)
		if ids := storedIDs(t, b, "q"); len(ids) != len(m.Jobs)+1 {
			t.Fatalf("stored %d jobs, want %d", len(ids), len(m.Jobs)+1)
		}
	})
}

// A unique key held by a job outside the bulk, or by two of its jobs,
// refuses the whole bulk with duplicate, naming the job and the holder.
func TestBulkUniqueKeys(t *testing.T) {
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "")
		holder := c.Request("q", "unique:k1", nil)

		outside := newBulk(t, "q", 5, map[int]string{2: "unique:k1"})
		c.Send(outside)
		e := expectBulkRefused(t, c, outside, 2, emqp.CodeDuplicate)
		if id, ok := emqp.DuplicateHolder(e.Text); !ok || id != holder {
			t.Fatalf("the refusal %q does not name the holder %s", e.Text, holder)
		}

		twice := newBulk(t, "q", 5, map[int]string{1: "unique:k2", 3: "unique:k2"})
		c.Send(twice)
		e = expectBulkRefused(t, c, twice, 3, emqp.CodeDuplicate)
		if id, ok := emqp.DuplicateHolder(e.Text); !ok || id != twice.Jobs[1].MsgID {
			t.Fatalf("the refusal %q does not name job 1 as the holder", e.Text)
		}
		if ids := storedIDs(t, b, "q"); len(ids) != 1 || ids[0] != holder {
			t.Fatalf("stored %v, want only the holder %s", ids, holder)
		}
	})
}

// The limits: max-bulk (a decoded BULK over it, and one with more frames
// than it allows, which also ends the connection), max-pending counted
// with the bulk's own jobs, repeated msgids; a client role is needed.
func TestBulkLimits(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", chain(fast, func(o *broker.Options) { o.MaxBulk, o.MaxPending = 5, 8 }))
	c := bt.Dial(t, b.Frontend(), "")

	over := newBulk(t, "q", 6, nil)
	c.Send(over)
	if e := bt.Expect[*emqp.Error](c); e.RefMsgID != over.MsgID || e.Code != emqp.CodeTooLarge || !strings.Contains(e.Text, "max-bulk") {
		t.Fatalf("ERROR %+v, want too_large naming max-bulk", e)
	}

	c.Send(newBulk(t, "q", 5, nil))
	bt.Expect[*emqp.Ack](c)
	full := newBulk(t, "q", 5, nil) // 5 stored + job 3 would make 9
	c.Send(full)
	expectBulkRefused(t, c, full, 3, emqp.CodeQueueFull)
	c.Send(newBulk(t, "other", 5, nil)) // another queue has room
	bt.Expect[*emqp.Ack](c)

	same := newBulk(t, "r", 3, nil)
	same.Jobs[2].MsgID = same.Jobs[0].MsgID
	c.Send(same)
	expectBulkRefused(t, c, same, 2, emqp.CodeBadRequest)
	c.Request("other", "", nil) // writes land in order: any of the bulks' has
	if ids := storedIDs(t, b, "r"); len(ids) != 0 {
		t.Fatalf("refused bulks stored %v", ids)
	}

	// Past the frames max-bulk allows (at least 64): ERROR, and the
	// connection ends, as for a frame too large.
	huge := bt.Dial(t, b.Frontend(), "")
	hb := newBulk(t, "q", 17, nil)
	_ = huge.TrySend(emqp.Encode(hb)...)
	if e := bt.Expect[*emqp.Error](huge); e.Code != emqp.CodeTooLarge || e.RefMsgID != hb.MsgID || !strings.Contains(e.Text, "max-bulk") {
		t.Fatalf("ERROR %+v, want too_large naming max-bulk for the bulk", e)
	}
	c.Sync() // the broker still serves
}

// Malformed BULKs get ERROR bad_request naming the problem (and the job),
// store nothing, and do not stop the broker.
func TestBulkMalformed(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	c := bt.Dial(t, b.Frontend(), "")
	head := []string{"", emqp.Version, "BULK", "b1"}
	for _, tc := range []struct {
		frames []string
		says   string
	}{
		{head, "at least one job"},
		{append(head, "j1", "q", ""), "4 frames for each job"},
		{append(head, "j1", "q", "", "p", "", "q", "", "p"), `job 1 (msgid ""): the msgid is empty`},
		{append(head, "j1", "", "", "p"), `job 0 (msgid "j1"): the queue name is empty`},
		{append(head, "j1", "q", "", "p", "j2", "q", "{nope", "p"), `job 1 (msgid "j2")`},
		{append(head, "j1", "q", "", "p", "j2", "q", "priority:99999", "p"), `job 1 (msgid "j2"): `},
	} {
		var frames [][]byte
		for _, f := range tc.frames {
			frames = append(frames, []byte(f))
		}
		c.SendFrames(frames...)
		e := bt.Expect[*emqp.Error](c)
		if e.RefMsgID != "b1" || e.Code != emqp.CodeBadRequest || !strings.Contains(e.Text, tc.says) {
			t.Fatalf("%q: ERROR %+v, want bad_request for b1 saying %q", tc.frames, e, tc.says)
		}
	}
	if ids := storedIDs(t, b, ""); len(ids) != 0 {
		t.Fatalf("malformed bulks stored %v", ids)
	}
	c.Request("q", "", nil) // still serving
}

// A BULK larger than the journal stores in one transaction (etcd's
// --max-txn-ops) is refused whole, saying so, before anything is written;
// one that fits is stored.
func TestBulkOverTheJournalsTransaction(t *testing.T) {
	backends(t, func(t *testing.T, start func(edit func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		c := bt.Dial(t, b.Frontend(), "")
		most := 128 // etcd's default --max-txn-ops
		if t.Name() == "TestBulkOverTheJournalsTransaction/bbolt" {
			most = broker.DefaultMaxBulk
		}
		if most < broker.DefaultMaxBulk {
			over := newBulk(t, "q", most+1, nil)
			c.Send(over)
			if e := bt.Expect[*emqp.Error](c); e.RefMsgID != over.MsgID || e.Code != emqp.CodeTooLarge || !strings.Contains(e.Text, fmt.Sprintf("%d jobs", most)) {
				t.Fatalf("ERROR %+v, want too_large saying the journal stores %d jobs in one", e, most)
			}
		}
		fits := newBulk(t, "q", min(most, 1000), nil)
		c.Send(fits)
		if a := bt.Expect[*emqp.Ack](c); a.AckedID != fits.MsgID {
			t.Fatalf("ACK for %s, want the bulk %s", a.AckedID, fits.MsgID)
		}
		if ids := storedIDs(t, b, "q"); len(ids) != len(fits.Jobs) {
			t.Fatalf("%d jobs stored, want %d", len(ids), len(fits.Jobs))
		}
	})
}
