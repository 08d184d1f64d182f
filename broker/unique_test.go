package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
)

// backends runs test on a broker journaling to bbolt and on one
// journaling to a real etcd member: start gives a broker on the test's
// journal (the same journal each call, so a restart keeps it).
func backends(t *testing.T, test func(t *testing.T, start func(edit func(*broker.Options)) *bt.Broker)) {
	t.Run("bbolt", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		test(t, func(edit func(*broker.Options)) *bt.Broker { return bt.Start(t, dir, chain(fast, edit)) })
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		cluster := etcdtest.Start(t, 1)
		cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cli.Close() })
		open := func(s broker.JournalSetup) (store.Journal, error) {
			o := etcdstore.DefaultOptions()
			o.OnCommit = s.OnCommit
			return etcdstore.Open(cli, o)
		}
		test(t, func(edit func(*broker.Options)) *bt.Broker {
			return bt.Start(t, "", chain(fast, func(o *broker.Options) { o.OpenJournal = open }, edit))
		})
	})
}

func chain(edits ...func(*broker.Options)) func(*broker.Options) {
	return func(o *broker.Options) {
		for _, e := range edits {
			if e != nil {
				e(o)
			}
		}
	}
}

// sendAll sends a REQUEST for each header frame without waiting and
// returns each one's answer, by msgid.
func sendAll(t *testing.T, p *bt.Peer, queue string, headers []string) (ids []string, answers map[string]emqp.Message) {
	t.Helper()
	answers = map[string]emqp.Message{}
	for _, h := range headers {
		hs, err := emqp.ParseHeaders(h)
		if err != nil {
			t.Fatal(err)
		}
		id := emqp.NewID()
		ids = append(ids, id)
		p.Send(&emqp.Request{MsgID: id, Queue: queue, Headers: hs})
	}
	for range headers {
		switch m := p.Recv().(type) {
		case *emqp.Ack:
			answers[m.AckedID] = m
		case *emqp.Error:
			answers[m.RefMsgID] = m
		default:
			t.Fatalf("answer %T %+v", m, m)
		}
	}
	return ids, answers
}

// refusedAsDuplicate checks that the answer to id is ERROR duplicate
// naming holder.
func refusedAsDuplicate(t *testing.T, answer emqp.Message, holder string) {
	t.Helper()
	e, ok := answer.(*emqp.Error)
	if !ok || e.Code != emqp.CodeDuplicate {
		t.Fatalf("answer %T %+v; want ERROR duplicate", answer, answer)
	}
	if h, ok := emqp.DuplicateHolder(e.Text); !ok || h != holder {
		t.Fatalf("ERROR duplicate %q names %q; want the holder %s", e.Text, h, holder)
	}
}

// A thousand REQUESTs with one unique key, from ten clients at once,
// store one job: one ACK, and every other answer ERROR duplicate naming
// the job that holds the key. The same msgid again is ACKed, and the key
// is held after a restart.
func TestUniqueKeyStoresOneJob(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		const clients, each = 10, 100
		type answer struct {
			id string
			m  emqp.Message
		}
		answers := make(chan answer, clients*each)
		var wg sync.WaitGroup
		for c := range clients {
			p := bt.Dial(t, b.Frontend(), fmt.Sprint("c", c))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids, got := sendAll(t, p, "q", repeat("unique:the-key,unique-for:3600", each))
				for _, id := range ids {
					answers <- answer{id, got[id]}
				}
			}()
		}
		wg.Wait()
		close(answers)
		var holder string
		var refused []emqp.Message
		for a := range answers {
			if _, ok := a.m.(*emqp.Ack); ok {
				if holder != "" {
					t.Fatalf("two REQUESTs with one key ACKed: %s and %s", holder, a.id)
				}
				holder = a.id
				continue
			}
			refused = append(refused, a.m)
		}
		if holder == "" || len(refused) != clients*each-1 {
			t.Fatalf("holder %q, %d refused; want one ACK and %d refusals", holder, len(refused), clients*each-1)
		}
		for _, m := range refused {
			refusedAsDuplicate(t, m, holder)
		}
		if n := b.Stats().Errors(emqp.CodeDuplicate); n != clients*each-1 || !slices.Contains(broker.ErrorCodes(), emqp.CodeDuplicate) {
			t.Errorf("ERRORs duplicate counted %d (shown: %v); want %d, in the stats and /metrics", n, slices.Contains(broker.ErrorCodes(), emqp.CodeDuplicate), clients*each-1)
		}
		if n := pendingOf(t, b, "q"); n != 1 {
			t.Fatalf("queue q holds %d jobs; want 1", n)
		}

		client := bt.Dial(t, b.Frontend(), "again")
		h, _ := emqp.ParseHeaders("unique:the-key")
		client.Send(&emqp.Request{MsgID: holder, Queue: "q", Headers: h})
		if ack := bt.Expect[*emqp.Ack](client); ack.AckedID != holder {
			t.Fatalf("the holder sent again: ACK of %s", ack.AckedID)
		}
		// Another queue's key of the same name is another key.
		client.Request("other", "unique:the-key", nil)

		client.Close()
		if err := b.Stop(); err != nil {
			t.Fatal(err)
		}
		b = start(nil)
		client = bt.Dial(t, b.Frontend(), "after")
		_, got := sendAll(t, client, "q", []string{"unique:the-key"})
		for _, m := range got {
			refusedAsDuplicate(t, m, holder)
		}
	})
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// pendingOf is the number of jobs of queue the broker holds.
func pendingOf(t *testing.T, b *bt.Broker, queue string) int {
	t.Helper()
	qs, err := b.Queues(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == queue {
			return q.Pending + q.Delayed + q.InFlight
		}
	}
	return 0
}

// A key is held while its job waits, is delayed or runs, and for its
// unique-for after the REPLY; the holder sent again within it is ACKed
// and does not run again. Without unique-for the REPLY lets it go at
// once; a dead job lets it go too.
func TestUniqueKeyHoldsUntilDoneAndForItsHold(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		client := bt.Dial(t, b.Frontend(), "c")
		held := client.Request("q", "unique:k1,unique-for:3600", nil)
		short := client.Request("q", "unique:k2", nil)
		doomed := client.Request("q", "unique:k3,retry-count:0", nil)
		delayed := client.Request("q", "unique:k4,delay:3600", nil)
		_, got := sendAll(t, client, "q", []string{"unique:k1", "unique:k2", "unique:k3", "unique:k4"})
		if len(got) != 4 {
			t.Fatalf("answers %v", got)
		}
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(3)
		for range 3 {
			req := bt.Expect[*emqp.Request](w)
			if _, running := got[req.MsgID]; running {
				t.Fatalf("a refused job ran: %s", req.MsgID)
			}
			// In flight, each still holds its key.
			_, again := sendAll(t, client, "q", []string{"unique:" + map[string]string{held: "k1", short: "k2", doomed: "k3"}[req.MsgID]})
			for _, m := range again {
				refusedAsDuplicate(t, m, req.MsgID)
			}
			if req.MsgID == doomed {
				w.Send(&emqp.Fail{MsgID: emqp.NewID(), OrigMsgID: req.MsgID, Reason: "no"})
			} else {
				w.Reply(req.MsgID, nil)
			}
		}
		w.Sync()
		bt.Eventually(t, "the dead job in the dead letters", func() bool { return b.Stats().DeadLettered == 1 })

		_, after := sendAll(t, client, "q", []string{"unique:k1", "unique:k2", "unique:k3", "unique:k4"})
		var freed []string
		for id, m := range after {
			switch e, _ := m.(*emqp.Error); {
			case e == nil:
				freed = append(freed, id)
			case strings.Contains(e.Text, held):
			case strings.Contains(e.Text, delayed):
			default:
				t.Errorf("after the jobs ended, %s: %+v", id, m)
			}
		}
		if len(freed) != 2 {
			t.Fatalf("%d of k1..k4 taken again: want k2 (no hold) and k3 (dead)", len(freed))
		}
		// The holder within its hold: ACKed, and not run again.
		h, _ := emqp.ParseHeaders("unique:k1,unique-for:3600")
		client.Send(&emqp.Request{MsgID: held, Queue: "q", Headers: h})
		if ack := bt.Expect[*emqp.Ack](client); ack.AckedID != held {
			t.Fatalf("ACK of %s", ack.AckedID)
		}
		w.Ready(3)
		for range 2 {
			if req := bt.Expect[*emqp.Request](w); req.MsgID == held {
				t.Fatal("the holder sent again within its hold ran again")
			} else {
				w.Reply(req.MsgID, nil)
			}
		}
		w.Sync() // a third job would come before the SYNC's answer
	})
}

// A hold ends: a key kept for unique-for:2 after its job's REPLY refuses
// a second job at once, and takes one once the two seconds have passed.
func TestUniqueKeyHoldEnds(t *testing.T) {
	t.Parallel()
	backends(t, func(t *testing.T, start func(func(*broker.Options)) *bt.Broker) {
		b := start(nil)
		client := bt.Dial(t, b.Frontend(), "c")
		first := client.Request("q", "unique:k,unique-for:2", nil)
		w := bt.Worker(t, b.Backend(), "w", "q")
		w.Ready(1)
		if req := bt.Expect[*emqp.Request](w); req.MsgID != first {
			t.Fatalf("ran %s", req.MsgID)
		}
		w.Reply(first, nil)
		w.Sync()
		h, _ := emqp.ParseHeaders("unique:k")
		send := func() emqp.Message {
			client.Send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Headers: h})
			return client.Recv()
		}
		refusedAsDuplicate(t, send(), first)
		bt.Eventually(t, "the key taken again after its hold", func() bool {
			switch m := send().(type) {
			case *emqp.Ack:
				return true
			case *emqp.Error:
				if !strings.Contains(m.Text, first) {
					t.Fatalf("refused, but not for the holder: %+v", m)
				}
			}
			return false
		})
	})
}
