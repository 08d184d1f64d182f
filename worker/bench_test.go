package worker_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// BenchmarkClientWorker is the broker's end-to-end path driven by the
// libraries: goroutines calling client.Send on one Client, one
// worker.Worker with 16 slots, 100-byte payloads, fsync on. With 16
// senders, 16 jobs are in flight; with 512, as many as in
// broker.BenchmarkEndToEnd (16 clients × 32).
//
//	go test -run '^$' -bench ClientWorker -benchtime 50000x ./worker/
func BenchmarkClientWorker(b *testing.B) {
	for _, senders := range []int{16, 512} {
		b.Run(fmt.Sprintf("senders=%d/slots=16", senders), func(b *testing.B) { clientWorker(b, senders) })
	}
}

func clientWorker(b *testing.B, senders int) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	br := bt.Start(b, "", func(o *broker.Options) { o.Logger = quiet })
	var done atomic.Int64
	finished := make(chan struct{})
	w, err := worker.New(worker.Options{Broker: br.Backend(), Concurrency: 16, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	w.Handle("bench", func(context.Context, *worker.Job) ([]byte, error) {
		if done.Add(1) == int64(b.N) {
			close(finished)
		}
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error, 1)
	go func() { stopped <- w.Run(ctx) }()
	c, err := client.New(client.Options{Broker: br.Frontend(), Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	payload := make([]byte, 100)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				if _, err := c.Send(context.Background(), "bench", payload); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	<-finished
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "jobs/s")
	b.StopTimer()
	cancel()
	<-stopped
}
