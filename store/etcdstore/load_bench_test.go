package etcdstore_test

import (
	"fmt"
	"testing"

	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/store/etcdstore"
)

// BenchmarkLoad: what a takeover does after reading the shadow, Load of
// 20,000 pending jobs: every job's head read from the shadow.
func BenchmarkLoad(b *testing.B) {
	cli := etcdClient(b, etcdtest.Start(b, 1))
	j, err := etcdstore.Open(cli, etcdstore.DefaultOptions())
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	const n = 20000
	errs := make(chan error, n)
	for i := range n {
		j.Append(&store.Job{MsgID: fmt.Sprintf("job-%06d", i), Queue: "q", Payload: make([]byte, 100)}, func(_ bool, err error) { errs <- err })
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		loaded := 0
		if err := j.Load(func(*store.Job) error { loaded++; return nil }); err != nil || loaded != n {
			b.Fatalf("loaded %d, %v", loaded, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/job")
}
