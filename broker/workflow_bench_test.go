package broker_test

import (
	"fmt"
	"log/slog"
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

// BenchmarkBatchCallback is a fan-out of 10,000 jobs in a batch with one
// callback after it (after-batch): a worker of 64 slots replies to each
// job at once; the figure is the time from the last REPLY of the batch
// to the callback's REQUEST at the worker (issue 32 wants it within
// 50 ms), on the default journal and on a 1-member etcd.
//
//	go test -run '^$' -bench BatchCallback -benchtime 5x ./broker/
func BenchmarkBatchCallback(b *testing.B) {
	b.Run("bbolt", func(b *testing.B) {
		batchCallback(b, bt.Start(b, "", func(o *broker.Options) { o.Logger = slog.New(slog.DiscardHandler) }))
	})
	b.Run("etcd", func(b *testing.B) {
		cluster := etcdtest.Start(b, 1)
		cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cli.Close() })
		batchCallback(b, bt.Start(b, "", func(o *broker.Options) {
			o.Logger = slog.New(slog.DiscardHandler)
			o.OpenJournal = func(s broker.JournalSetup) (store.Journal, error) {
				eo := etcdstore.DefaultOptions()
				eo.OnCommit = s.OnCommit
				return etcdstore.Open(cli, eo)
			}
		}))
	})
}

func batchCallback(b *testing.B, br *bt.Broker) {
	const fan = 10_000
	c := dialRaw(b, br.Frontend(), "c")
	w := dialRaw(b, br.Backend(), "w")
	w.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "fan"}}})
	for range 64 {
		w.send(&emqp.Ready{MsgID: emqp.NewID()})
	}
	var worst, total time.Duration
	for i := range b.N {
		batch := fmt.Sprintf("batch-%d", i)
		h := mustHeaders(b, "batch:"+batch)
		for range fan {
			c.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "fan", Headers: h})
		}
		callback := emqp.NewID()
		c.send(&emqp.Request{MsgID: callback, Queue: "fan", Headers: mustHeaders(b, "after-batch:"+batch)})
		for acks := 0; acks < fan+1; {
			if _, ok := (<-c.in).(*emqp.Ack); ok {
				acks++
			}
		}
		var last time.Time
		for replied := 0; ; {
			m := <-w.in
			r, ok := m.(*emqp.Request)
			if !ok {
				continue
			}
			if r.MsgID == callback {
				if replied != fan {
					b.Fatalf("the callback came after %d of %d", replied, fan)
				}
				d := time.Since(last)
				total += d
				worst = max(worst, d)
				w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
				w.send(&emqp.Ready{MsgID: emqp.NewID()})
				break
			}
			w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
			replied++
			last = time.Now()
		}
	}
	b.ReportMetric(float64(total.Microseconds())/float64(b.N)/1000, "ms/callback")
	b.ReportMetric(float64(worst.Microseconds())/1000, "ms-worst")
}

// BenchmarkParentRelease is one job with 10,000 jobs waiting for it
// (after), its worker holding it until they are all stored: the figure
// is the time from its REPLY to the last of them run by the worker of 64
// slots, which replies at once: releasing them (one journal write on
// bbolt), then running them.
//
//	go test -run '^$' -bench ParentRelease -benchtime 3x ./broker/
func BenchmarkParentRelease(b *testing.B) {
	const children = 10_000
	br := bt.Start(b, "", func(o *broker.Options) { o.Logger = slog.New(slog.DiscardHandler) })
	c := dialRaw(b, br.Frontend(), "c")
	w := dialRaw(b, br.Backend(), "w")
	w.send(&emqp.Inform{MsgID: emqp.NewID(), Queues: []emqp.Queue{{Weight: 10, Name: "q"}}})
	for range 64 {
		w.send(&emqp.Ready{MsgID: emqp.NewID()})
	}
	next := func() *emqp.Request {
		for {
			if r, ok := (<-w.in).(*emqp.Request); ok {
				return r
			}
		}
	}
	var total time.Duration
	for range b.N {
		parent := emqp.NewID()
		c.send(&emqp.Request{MsgID: parent, Queue: "q"})
		if r := next(); r.MsgID != parent {
			b.Fatalf("got %s", r.MsgID)
		}
		h := mustHeaders(b, "after:"+parent)
		for range children {
			c.send(&emqp.Request{MsgID: emqp.NewID(), Queue: "q", Headers: h})
		}
		for acks := 0; acks < children+1; {
			if _, ok := (<-c.in).(*emqp.Ack); ok {
				acks++
			}
		}
		start := time.Now()
		w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: parent})
		w.send(&emqp.Ready{MsgID: emqp.NewID()})
		for range children {
			r := next()
			w.send(&emqp.Reply{MsgID: emqp.NewID(), OrigMsgID: r.MsgID})
			w.send(&emqp.Ready{MsgID: emqp.NewID()})
		}
		total += time.Since(start)
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/release-and-run")
}
