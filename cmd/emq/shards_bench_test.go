package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
)

// BenchmarkQueueMove times the move of a queue of EMQ_MOVE_JOBS stored
// jobs (100,000; 100 bytes each) between two shards on one 3-member etcd
// (in this process), with emq queues place. It reports the pause (from
// the placement's hold, when both shards stop taking and dispatching the
// queue's jobs, to its flip, when the target serves it), the live copy
// before it (the queue served meanwhile), and the whole move (with the
// source forgetting its copy):
//
//	go test -run '^$' -bench QueueMove -benchtime 1x ./cmd/emq
//
// With EMQ_MOVE_RATE set, a sender adds that many jobs a second to the
// queue while it moves (no worker takes them): what the pause then costs
// is sending what came during the live copy.
func BenchmarkQueueMove(b *testing.B) {
	jobs := 100_000
	if n, err := strconv.Atoi(os.Getenv("EMQ_MOVE_JOBS")); err == nil {
		jobs = n
	}
	rate, _ := strconv.Atoi(os.Getenv("EMQ_MOVE_RATE"))
	etcd := etcdtest.Start(b, 3)
	eps := strings.Join(etcd.Endpoints(), ",")
	shards := startShards(b, etcd.Endpoints(), nil, []string{"--log-level", "info"}, "a", "b")
	from, to := "a", "b"
	mustEmq(b, "queues", "place", "mq", from, "--etcd-endpoints", eps)
	fill(b, shards[from].frontend, "mq", jobs)
	for b.Loop() {
		var moving, held, flipped, ended time.Time
		stop := make(chan struct{})
		watched := make(chan struct{})
		go func() { // the placement's steps, as they come
			defer close(watched)
			for {
				tb, _, err := loadTable(etcd.Endpoints())
				now := time.Now()
				if err == nil {
					m, ok := tb.Moving["mq"]
					switch {
					case ok && !m.Held && !m.Copied && moving.IsZero():
						moving = now
					case ok && m.Held && !m.Copied && held.IsZero():
						held = now
					case ok && m.Copied && flipped.IsZero():
						flipped = now
					}
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}()
		var added atomic.Int64
		sending := make(chan struct{})
		if rate > 0 {
			go func() { // rate jobs a second, 64 senders at once
				defer close(sending)
				c, err := client.New(client.Options{Broker: shards[from].frontend, Logger: bt.Logger(b), ResendAfter: 100 * time.Millisecond})
				if err != nil {
					b.Error(err)
					return
				}
				defer c.Close()
				tokens := make(chan struct{}, rate)
				var senders sync.WaitGroup
				for range 64 {
					senders.Go(func() {
						for range tokens {
							if _, err := c.Send(context.Background(), "mq", []byte("during the move")); err != nil {
								b.Error(err)
								return
							}
							added.Add(1)
						}
					})
				}
				tick := time.NewTicker(10 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						close(tokens)
						senders.Wait()
						return
					case <-tick.C:
					}
					for range max(1, rate/100) {
						select {
						case tokens <- struct{}{}:
						default: // the senders are behind: the rate is not reached
						}
					}
				}
			}()
		} else {
			close(sending)
		}
		start := time.Now()
		mustEmq(b, "queues", "place", "mq", to, "--etcd-endpoints", eps)
		ended = time.Now()
		close(stop)
		<-watched
		<-sending
		jobs += int(added.Load())
		if got := queuesOf(b, shards[to])["mq"].Pending; got != jobs {
			b.Fatalf("shard %s holds %d jobs of mq after the move, want %d", to, got, jobs)
		}
		if moving.IsZero() {
			moving = start
		}
		if flipped.IsZero() {
			flipped = ended
		}
		if held.IsZero() { // held and flipped between two looks
			held = flipped
		}
		for line := range strings.SplitSeq(shards[from].log(), "\n") {
			if strings.Contains(line, "move:") {
				b.Log(line)
			}
		}
		b.ReportMetric(flipped.Sub(held).Seconds(), "pause-s")
		b.ReportMetric(held.Sub(moving).Seconds(), "live-copy-s")
		b.ReportMetric(ended.Sub(start).Seconds(), "move-s")
		b.ReportMetric(float64(added.Load())/ended.Sub(start).Seconds(), "sent-jobs/s")
		from, to = to, from
	}
}

// fill stores n jobs of 100 bytes in queue through frontend, 64 at once.
func fill(b testing.TB, frontend, queue string, n int) {
	c, err := client.New(client.Options{Broker: frontend, Logger: bt.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	payload := []byte(strings.Repeat("x", 100))
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 64)
	for range 64 {
		wg.Go(func() {
			for range next {
				if _, err := c.Send(ctx, queue, payload); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			b.Fatal(fmt.Errorf("filling %s: %w", queue, err))
		}
	}
	close(next)
	wg.Wait()
}
