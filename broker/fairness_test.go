package broker

import (
	"io"
	"log/slog"
	"strconv"
	"testing"

	"github.com/eventmq/emq/emqp"
)

// One tenant's 100,000 jobs queued first, then 100 tenants with 10 jobs
// each, 16 slots: every small tenant's first job goes out within the
// first 200 dispatches (the figure), through the loop's own
// dispatch (offer, reply) on a real journal, without sockets.
func TestSmallTenantsAreNotStuckBehindABigOne(t *testing.T) {
	opts := DefaultOptions()
	opts.DataDir, opts.OpenJournal = t.TempDir(), openBolt
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	br, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { br.journal.Close() })
	q := br.queue("q")
	add := func(id, tenant string) {
		j := &job{id: id, q: q, headers: emqp.HeadersFrom(emqp.Header{Name: emqp.HeaderTenant, Value: tenant}), retries: 3, state: pending}
		br.jobs.set(id, j)
		br.adopt(j)
		q.jobs.pushBack(j)
	}
	for i := range 100_000 {
		add("big-"+strconv.Itoa(i), "big")
	}
	for s := range 100 {
		for i := range 10 {
			add("small-"+strconv.Itoa(s)+"-"+strconv.Itoa(i), "small-"+strconv.Itoa(s))
		}
	}
	w := peerKey{backend, "worker"}
	br.inform(nil, w, &emqp.Inform{MsgID: "i", Queues: []emqp.Queue{{Weight: 10, Name: "q"}}, PeerType: emqp.PeerWorker})
	p := br.peers[w]
	p.free = 16
	firsts, last := map[string]bool{}, 0
	for n := 0; len(firsts) < 100; {
		br.offer(p)
		for id, j := range p.held {
			n++
			if tn := j.ten.name; tn != "big" && !firsts[tn] {
				firsts[tn], last = true, n
			}
			br.reply(p, &emqp.Reply{MsgID: "r", OrigMsgID: id})
			p.free++
		}
		br.out.take()
		if n > 1000 {
			t.Fatalf("after %d dispatches only %d small tenants had a job out", n, len(firsts))
		}
	}
	t.Logf("every small tenant's first job went out within the first %d dispatches", last)
	if last > 200 {
		t.Fatalf("the last small tenant's first job was dispatch %d, want at most 200", last)
	}
}
