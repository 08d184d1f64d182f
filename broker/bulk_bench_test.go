package broker_test

import (
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

// BenchmarkBulk is one sender storing jobs in BULKs, 100-byte payloads,
// with 4 BULKs in flight: jobs/s stored (every BULK ACKed, so fsynced),
// on the default journal (bulks of 1,000 jobs) and on a 1-member etcd
// (bulks of 128, the most one etcd transaction takes by default).
// Nothing is dispatched: the queue has no worker.
//
//	go test -run '^$' -bench Bulk -benchtime 200x ./broker/
func BenchmarkBulk(b *testing.B) {
	quiet := func(o *broker.Options) { o.Logger = slog.New(slog.DiscardHandler) }
	b.Run("bbolt/jobs=1000", func(b *testing.B) { bulkLoad(b, bt.Start(b, "", quiet), 1000) })
	b.Run("etcd/jobs=128", func(b *testing.B) {
		cluster := etcdtest.Start(b, 1)
		cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cli.Close() })
		bulkLoad(b, bt.Start(b, "", func(o *broker.Options) {
			quiet(o)
			o.OpenJournal = func(s broker.JournalSetup) (store.Journal, error) {
				eo := etcdstore.DefaultOptions()
				eo.OnCommit = s.OnCommit
				return etcdstore.Open(cli, eo)
			}
		}), 128)
	})
}

func bulkLoad(b *testing.B, br *bt.Broker, size int) {
	const window = 4
	c := dialRaw(b, br.Frontend(), "sender")
	payload := make([]byte, 100)
	bulk := func() *emqp.Bulk {
		m := &emqp.Bulk{MsgID: emqp.NewID(), Jobs: make([]emqp.BulkJob, size)}
		for i := range m.Jobs {
			m.Jobs[i] = emqp.BulkJob{MsgID: emqp.NewID(), Queue: "bulk", Payload: payload}
		}
		return m
	}
	b.ResetTimer()
	start := time.Now()
	sent, acked := 0, 0
	for acked < b.N {
		for sent < b.N && sent-acked < window {
			if err := c.send(bulk()); err != nil {
				b.Fatal(err)
			}
			sent++
		}
		m, ok := c.next(b, "the ACK of a BULK")
		if !ok {
			b.Fatal("connection closed")
		}
		if _, ok := m.(*emqp.Ack); !ok {
			b.Fatalf("got %T %+v, want an ACK", m, m)
		}
		acked++
	}
	b.ReportMetric(float64(b.N*size)/time.Since(start).Seconds(), "jobs/s")
}
