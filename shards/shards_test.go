package shards_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/goleak"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	"github.com/eventmq/emq/internal/grouptest"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/store"
	"github.com/eventmq/emq/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, etcdtest.Leftovers...) }

// A queue placed on a shard is stored there whichever shard a client
// is given, and Describe shows each shard's leader and queues.
func TestPlacedQueueIsStoredAtItsShard(t *testing.T) {
	etcd := etcdtest.Start(t, 1).Endpoints()
	groups := grouptest.StartShards(t, etcd, 1, "a", "b")
	cli := groups["a"].Etcd(t)
	q := "" // a queue the hash puts on a
	for i := 0; q == ""; i++ {
		if name := fmt.Sprint("q", i); grouptest.Table(t, etcd).Owner(name) == "a" {
			q = name
		}
	}
	place(t, cli, q, "b") // a move of an empty queue
	var version int64
	testutil.Eventually(t, q+" on b", func() bool {
		tb := grouptest.Table(t, etcd)
		_, moving := tb.Moving[q]
		version = tb.Version
		return !moving && tb.Owner(q) == "b"
	})
	testutil.Eventually(t, "shard a serving by the new placement", func() bool {
		return groups["a"].Members[0].Info().Placement == version
	})
	id := grouptest.Send(t, groups["a"].Frontends(), q)
	ctx := context.Background()
	if _, err := groups["b"].Leader(t).Admin(t).Job(ctx, id, false); err != nil {
		t.Fatalf("the job sent by way of shard a, at b: %v", err)
	}
	if _, err := groups["a"].Leader(t).Admin(t).Job(ctx, id, false); err == nil {
		t.Fatalf("the job of %s, placed on b, is stored at a", q)
	}
	p, _, err := shards.LoadPlacement(ctx, cli, shards.DefaultPlacementPrefix)
	if err != nil {
		t.Fatal(err)
	}
	v := shards.Describe(ctx, p, cli, group.DefaultOptions())
	for _, si := range v.Shards {
		want := groups[si.Name].Leader(t).Name
		if si.Leader != want || (si.Name == "b") != (len(si.Queues) == 1 && si.Queues[0] == q) {
			t.Errorf("Describe's shard %s: %+v, want %s leading and %s on b", si.Name, si, want, q)
		}
	}
}

// A queue with stored jobs (pending, one delayed, dead letters), a
// schedule and controls moves from shard a to shard b: afterwards b
// holds all of them as they were, a none, and every job runs once, at
// b. A client sending meanwhile is held back (ERROR unavailable) and
// then stores its job at b.
func TestMoveAQueueBetweenShards(t *testing.T) {
	etcd := etcdtest.Start(t, 1).Endpoints()
	groups := grouptest.StartShards(t, etcd, 1, "a", "b")
	cli := groups["a"].Etcd(t)
	place(t, cli, "mq", "a")
	ctx, cancel := context.WithTimeout(context.Background(), 2*grouptest.Wait)
	defer cancel()
	a, b := groups["a"].Leader(t), groups["b"].Leader(t)
	aa, ba := a.Admin(t), b.Admin(t)
	testutil.Eventually(t, "shard a serving mq", func() bool { return grouptest.Table(t, etcd).Owner("mq") == "a" })
	c, err := client.New(client.Options{Broker: a.Frontend, Logger: bt.Logger(t), ResendAfter: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Two dead letters: jobs that fail with no retry left.
	stopW := failingWorker(t, a.Backend, "mq")
	var dead []string
	for i := range 2 {
		id, err := c.Send(ctx, "mq", []byte(fmt.Sprint("dies ", i)), client.RetryCount(0))
		if err != nil {
			t.Fatal(err)
		}
		dead = append(dead, id)
	}
	testutil.Eventually(t, "two dead letters", func() bool { return a.Queue(t, "mq").Dead == 2 })
	stopW()
	three, two, four, weight2 := 3, 2, 4, 2
	rate := 3.0
	must(t, func() error {
		_, err := aa.ChangeQueue(ctx, "mq", broker.QueueChange{Concurrency: &three, TenantConcurrency: &two})
		return err
	})
	must(t, func() error {
		_, err := aa.ChangeTenant(ctx, "mq", "acme", broker.TenantChange{Rate: &rate, Weight: &four})
		return err
	})
	must(t, func() error {
		_, err := aa.ChangeTenant(ctx, "mq", "", broker.TenantChange{Weight: &weight2})
		return err
	})
	must(t, func() error { return aa.SetLimiter(ctx, "partner", store.LimiterSettings{Rate: 5}) })
	sent := map[string]bool{}
	for i := range 300 {
		id, err := c.Send(ctx, "mq", []byte(fmt.Sprint("job ", i)))
		if err != nil {
			t.Fatal(err)
		}
		sent[id] = true
	}
	later, err := c.Send(ctx, "mq", []byte("later"), client.Delay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Schedule(ctx, "mq", client.Every(time.Hour), []byte("hourly"), client.NoHaste(), client.ScheduleID("hourly")); err != nil {
		t.Fatal(err)
	}

	_, move := place(t, cli, "mq", "b")
	if move != (emqp.Move{From: "a", To: "b"}) {
		t.Fatalf("placing mq on b: move %+v, want a to b", move)
	}
	id, err := c.Send(ctx, "mq", []byte("sent during the move"))
	if err != nil {
		t.Fatalf("a job sent during the move: %v", err)
	}
	sent[id] = true
	testutil.EventuallyWithin(t, 2*grouptest.Wait, "the move over", func() bool {
		tb := grouptest.Table(t, etcd)
		_, moving := tb.Moving["mq"]
		return !moving && tb.Owner("mq") == "b"
	})

	qa, qb := a.Queue(t, "mq"), b.Queue(t, "mq")
	if qa.Pending+qa.Delayed+qa.Dead != 0 {
		t.Fatalf("shard a still holds %+v of the moved queue", qa)
	}
	if qb.Pending != len(sent) || qb.Delayed != 1 || qb.Dead != 2 || qb.Concurrency != 3 || qb.TenantConcurrency != 2 {
		t.Fatalf("shard b holds %+v; want %d pending, 1 delayed, 2 dead, concurrency 3, the tenants' default concurrency 2", qb, len(sent))
	}
	tenants, err := ba.Tenants(ctx, "mq", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]store.TenantSettings{}
	for _, ti := range tenants.Tenants {
		own[ti.Name] = ti.Own
	}
	if acme := own["acme"]; acme.Rate == nil || *acme.Rate != 3 || acme.Weight != 4 || acme.Concurrency != nil || own[""].Weight != 2 {
		t.Fatalf("the tenants at shard b: %+v; want acme (rate 3, weight 4) and the jobs without a tenant (weight 2)", tenants)
	}
	if ls, err := ba.Limiters(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("the limiters at shard b: %+v, %v; want none (each shard has its own)", ls, err)
	}
	if _, err := ba.Schedule(ctx, "hourly", false); err != nil {
		t.Fatalf("schedule hourly at shard b: %v", err)
	}
	if _, err := aa.Schedule(ctx, "hourly", false); err == nil {
		t.Fatal("schedule hourly is still at shard a")
	}
	for _, id := range append(dead, later) {
		if _, err := ba.Job(ctx, id, false); err != nil {
			t.Fatalf("job %s at shard b: %v", id, err)
		}
	}

	var mu sync.Mutex
	ran := map[string]int{}
	wk, err := worker.New(worker.Options{Broker: a.Backend, Concurrency: 8, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	wk.Handle("mq", func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		ran[j.MsgID]++
		mu.Unlock()
		return nil, nil
	})
	wctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wk.Run(wctx) }()
	defer func() { stop(); <-done }()
	testutil.Eventually(t, "every moved job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) >= len(sent)
	})
	mu.Lock()
	defer mu.Unlock()
	for id := range sent {
		if ran[id] != 1 {
			t.Fatalf("job %s ran %d times", id, ran[id])
		}
	}
}

// place puts queue on shard in the placement as emq queues place does:
// a move when the queue changes shards (its source's leader carries it
// out), else a change of the placement. It returns the placement
// written and the move (zero: none).
func place(t *testing.T, cli *clientv3.Client, queue, shard string) (*shards.Placement, emqp.Move) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), grouptest.Wait)
	defer cancel()
	var move emqp.Move
	p, err := shards.ChangePlacement(ctx, cli, shards.DefaultPlacementPrefix, func(p *shards.Placement) error {
		move = emqp.Move{}
		from := p.Table().Owner(queue)
		save := p.Queues
		p.Queues = maps.Clone(save)
		shards.PlaceQueue(p, queue, shard)
		to := p.Table().Owner(queue)
		if from == "" || from == to || to == "" {
			return nil
		}
		p.Queues = save
		if p.Moving == nil {
			p.Moving = map[string]emqp.Move{}
		}
		move = emqp.Move{From: from, To: to}
		p.Moving[queue] = move
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p, move
}

// failingWorker serves queue at backend with a handler that fails every
// job, until the returned func stops it.
func failingWorker(t *testing.T, backend, queue string) func() {
	w, err := worker.New(worker.Options{Broker: backend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle(queue, func(context.Context, *worker.Job) ([]byte, error) { return nil, fmt.Errorf("fails on purpose") })
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() { stop(); <-done }
}

func must(t *testing.T, f func() error) {
	t.Helper()
	if err := f(); err != nil {
		t.Fatal(err)
	}
}
