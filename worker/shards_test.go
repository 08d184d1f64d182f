package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// TestWorkerServesEachShardItsQueues: a worker given shard a's backend,
// serving a queue of a and a queue of b, INFORMs each shard of its own
// queue and runs the jobs of both; when a queue is placed on the other
// shard, it follows within its next read of the placement.
func TestWorkerServesEachShardItsQueues(t *testing.T) {
	defer worker.SetRoutesEvery(100 * time.Millisecond)()
	shards, table := bt.StartShards(t, "a", "b")
	table.Queues["qa"], table.Queues["qb"] = "a", "b"
	bt.SetShards(t, shards, table)

	var mu sync.Mutex
	ran := map[string]string{}
	w, err := worker.New(worker.Options{Broker: shards["a"].Backend(), Concurrency: 2, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	handle := func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		ran[j.MsgID] = j.Queue
		mu.Unlock()
		return nil, nil
	}
	w.Handle("qa", handle)
	w.Handle("qb", handle)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	defer func() { stop(); <-done }()

	c, err := client.New(client.Options{Broker: shards["a"].Frontend(), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	send := func(queue string) string {
		t.Helper()
		id, err := c.Send(sctx, queue, []byte(queue))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	ranAll := func(ids ...string) func() bool {
		return func() bool {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if ran[id] == "" {
					return false
				}
			}
			return true
		}
	}
	bt.Eventually(t, "the jobs of both shards run", ranAll(send("qa"), send("qb")))
	workersOn := func(shard, queue string) int {
		qs, err := shards[shard].Queues(sctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range qs {
			if q.Name == queue {
				return q.Workers
			}
		}
		return 0
	}
	if workersOn("a", "qa") != 1 || workersOn("b", "qb") != 1 || workersOn("a", "qb") != 0 || workersOn("b", "qa") != 0 {
		t.Fatal("the worker did not INFORM each shard of its own queue alone")
	}

	table.Queues["qb"] = "a"
	bt.SetShards(t, shards, table)
	bt.Eventually(t, "the worker serving qb at shard a", func() bool { return workersOn("a", "qb") == 1 })
	bt.Eventually(t, "qb's job run at its new shard", ranAll(send("qb")))
}
