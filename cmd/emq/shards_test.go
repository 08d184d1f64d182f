package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/internal/etcdtest"
	shardpkg "github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/worker"
)

// TestShardsRouteEveryJobToItsOwner: three shards and 30 queues, on one
// 3-member etcd, and on three etcd clusters of their own (one member
// each; the placement on the first). A client given one shard's frontend and a worker given
// one shard's backend reach every queue's owner: each shard stores only
// its own queues' jobs and has the worker on only its own queues, and
// every job runs. A client whose placement went stale (a queue placed
// elsewhere since) is told ERROR moved and stores the job at the new
// owner, with the same msgid.
func TestShardsRouteEveryJobToItsOwner(t *testing.T) {
	t.Run("one etcd", func(t *testing.T) {
		testShardsRoute(t, etcdtest.Start(t, 3).Endpoints(), nil)
	})
	t.Run("three etcds", func(t *testing.T) {
		own := map[string][]string{}
		for _, name := range []string{"a", "b", "c"} {
			own[name] = etcdtest.Start(t, 1).Endpoints()
		}
		testShardsRoute(t, own["a"], own)
	})
}

func testShardsRoute(t *testing.T, placement []string, etcdOf map[string][]string) {
	eps := strings.Join(placement, ",")
	shards := startShards(t, placement, etcdOf, nil, "a", "b", "c")
	mustEmq(t, "queues", "place", "q00", "c", "--etcd-endpoints", eps)

	var queues []string
	for i := range 30 {
		queues = append(queues, fmt.Sprintf("q%02d", i))
	}
	table, _, err := loadTable(placement)
	if err != nil {
		t.Fatal(err)
	}
	owned := map[string][]string{}
	for _, q := range queues {
		owned[table.Owner(q)] = append(owned[table.Owner(q)], q)
	}
	if table.Owner("q00") != "c" || len(owned) != 3 {
		t.Fatalf("placement %+v spreads the queues as %v: want q00 on c, and every shard some", table, owned)
	}

	c, err := client.New(client.Options{Broker: shards["b"].frontend, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	sent := map[string]string{} // msgid → queue
	for _, q := range queues {
		for range 5 {
			id, err := c.Send(ctx, q, []byte("job of "+q))
			if err != nil {
				t.Fatalf("send to %s: %v", q, err)
			}
			sent[id] = q
		}
	}
	for name, b := range shards {
		got := queuesOf(t, b)
		for _, q := range queues {
			mine := slices.Contains(owned[name], q)
			if mine && got[q].Pending != 5 {
				t.Errorf("shard %s owns %s but holds %d of its 5 jobs", name, q, got[q].Pending)
			}
			if !mine && got[q].Pending != 0 {
				t.Errorf("shard %s does not own %s but holds %d of its jobs", name, q, got[q].Pending)
			}
		}
	}
	// The client read the placement before its first job: no job was
	// sent to a shard that does not own its queue.
	for name, b := range shards {
		if m := b.metric(t, `emq_protocol_errors_total{code="moved"}`); m != "" && !strings.HasSuffix(m, " 0") {
			t.Errorf("shard %s refused jobs as moved: %s", name, m)
		}
	}

	// One worker, given shard a's backend only, serves all 30 queues.
	var mu sync.Mutex
	ran := map[string]string{}
	w, err := worker.New(worker.Options{Broker: shards["a"].backend, Concurrency: 8, Logger: bt.Logger(t),
		HeartbeatInterval: 100 * time.Millisecond, HeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range queues {
		w.Handle(q, func(_ context.Context, j *worker.Job) ([]byte, error) {
			mu.Lock()
			ran[j.MsgID] = j.Queue
			mu.Unlock()
			return nil, nil
		})
	}
	wctx, stopWorker := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { stopWorker(); <-done }()
	bt.Eventually(t, "every job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == len(sent)
	})
	for id, q := range sent {
		if ran[id] != q {
			t.Fatalf("job %s of %s ran as %q", id, q, ran[id])
		}
	}
	for name, b := range shards {
		for q, info := range queuesOf(t, b) {
			if info.Workers > 0 && !slices.Contains(owned[name], q) {
				t.Errorf("the worker INFORMed shard %s of %s, which it does not own", name, q)
			}
		}
	}

	stopWorker()
	<-done
	done <- nil

	// A queue whose shard holds a job of it is moved with the job.
	busy := table.Owner("q02")
	other := "a"
	if busy == "a" {
		other = "b"
	}
	waits, err := c.Send(ctx, "q02", []byte("waits"))
	if err != nil {
		t.Fatal(err)
	}
	mustEmq(t, "queues", "place", "q02", other, "--etcd-endpoints", eps)
	if now, _, _ := loadTable(placement); now.Owner("q02") != other || len(now.Moving) != 0 {
		t.Fatalf("after the move: q02 on %s, moving %v; want it on %s, nothing moving", now.Owner("q02"), now.Moving, other)
	}
	if got := queuesOf(t, shards[other])["q02"].Pending; got != 1 {
		t.Fatalf("shard %s holds %d jobs of q02 after the move, want job %s", other, got, waits)
	}
	if got := queuesOf(t, shards[busy])["q02"].Pending; got != 0 {
		t.Fatalf("shard %s still holds %d jobs of q02 after the move", busy, got)
	}

	// A stale placement: q01 (its jobs all done) is placed on another
	// shard after the client read it. The old owner answers ERROR moved,
	// and the job is stored at the new owner under the msgid it was sent
	// with.
	from := table.Owner("q01")
	to := "a"
	if from == "a" {
		to = "b"
	}
	mustEmq(t, "queues", "place", "q01", to, "--etcd-endpoints", eps)
	now, _, err := loadTable(placement)
	if err != nil || now.Owner("q01") != to {
		t.Fatalf("q01 placed on %s: the placement says %s (%v)", to, now.Owner("q01"), err)
	}
	bt.Eventually(t, "the old owner serving by the new placement", func() bool {
		info := shards[from].group()
		return info != nil && info.Placement == now.Version
	})
	movedBefore := shards[from].metric(t, `emq_protocol_errors_total{code="moved"}`)
	id, err := c.Send(ctx, "q01", []byte("after the move"), client.MsgID("after-the-move"))
	if err != nil || id != "after-the-move" {
		t.Fatalf("send to q01 after it was placed elsewhere: %q, %v", id, err)
	}
	if got := queuesOf(t, shards[to])["q01"].Pending; got != 1 {
		t.Fatalf("the new owner %s holds %d jobs of q01, want the one sent", to, got)
	}
	if m := shards[from].metric(t, `emq_protocol_errors_total{code="moved"}`); m == movedBefore {
		t.Fatalf("the old owner %s: %q, want one more ERROR moved", from, m)
	}
	// The admin view: every broker shows the shards and their leaders,
	// and emq shards stats sums the shards' counters.
	resp, err := shards["a"].get("/api/v1/shards")
	if err != nil {
		t.Fatal(err)
	}
	var view shardpkg.Info
	err = json.NewDecoder(resp.Body).Decode(&view)
	resp.Body.Close()
	if err != nil || view.Shard != "a" || len(view.Shards) != 3 || view.Shards[1].Name != "b" || view.Shards[1].Leader != shards["b"].name {
		t.Fatalf("/api/v1/shards of shard a: %+v, %v", view, err)
	}
	var st struct {
		Shards []ShardStats
		Total  ShardStats
	}
	if err := json.Unmarshal([]byte(mustEmq(t, "shards", "stats", "--etcd-endpoints", eps, "--json")), &st); err != nil {
		t.Fatal(err)
	}
	counter := func(s ShardStats, name string) int64 {
		for _, c := range s.Counters {
			if c.Name == name {
				return c.Value
			}
		}
		return -1
	}
	var sum int64
	for _, s := range st.Shards {
		if s.Error != "" {
			t.Fatalf("emq shards stats: shard %s: %s", s.Shard, s.Error)
		}
		sum += counter(s, "acked")
		for _, q := range s.Queues {
			if q.Pending > 0 && now.Owner(q.Name) != s.Shard {
				t.Fatalf("emq shards stats shows %d jobs of %s on shard %s; it is on %s", q.Pending, q.Name, s.Shard, now.Owner(q.Name))
			}
		}
	}
	if total := counter(st.Total, "acked"); total != sum || total < int64(len(sent)) {
		t.Fatalf("emq shards stats: acked %d in all, the shards' sum %d; want it and at least the %d sent", total, sum, len(sent))
	}

	out := mustEmq(t, "shards", "--etcd-endpoints", eps)
	for name, b := range shards {
		if !strings.Contains(out, name+"  ") || !strings.Contains(out, b.name) {
			t.Fatalf("emq shards does not show shard %s led by %s:\n%s", name, b.name, out)
		}
	}
}

// TestQueueMovedUnderLoadWithKills: two shards of two brokers each, jobs
// flowing through one queue, which is moved from shard to shard 20
// times (EMQ_MOVES sets how many). At each move in turn the source's or
// the target's leader is SIGKILLed, once the move has started or once it
// has flipped (or, every fifth move, none), and started again. Every
// move ends, senders see no error, and every ACKed job runs.
func TestQueueMovedUnderLoadWithKills(t *testing.T) {
	moves := 20
	if n, err := strconv.Atoi(os.Getenv("EMQ_MOVES")); err == nil {
		moves = n
	}
	etcd := etcdtest.Start(t, 1)
	eps := strings.Join(etcd.Endpoints(), ",")
	brokers := map[string][]*groupBroker{}
	for _, name := range []string{"a", "b"} {
		prefix := "/emq/" + name + "/"
		var fronts, backs, admins []string
		for i := range 2 {
			b := makeGroupBroker(t, etcd.Endpoints(), fmt.Sprintf("%s-%d", name, i+1), "--shard", name, "--etcd-prefix", prefix, "--log-level", "info")
			brokers[name] = append(brokers[name], b)
			fronts, backs, admins = append(fronts, b.frontend), append(backs, b.backend), append(admins, b.admin)
		}
		mustEmq(t, "shards", "add", name, "--etcd-endpoints", eps, "--frontend", strings.Join(fronts, ","),
			"--backend", strings.Join(backs, ","), "--shard-admin", strings.Join(admins, ","), "--shard-prefix", prefix)
	}
	mustEmq(t, "queues", "place", "mq", "a", "--etcd-endpoints", eps)
	for _, bs := range brokers {
		for _, b := range bs {
			b.start()
		}
	}
	for _, bs := range brokers {
		leaderOf(t, bs...)
	}
	var fronts, backs []string
	for _, b := range brokers["a"] {
		fronts, backs = append(fronts, b.frontend), append(backs, b.backend)
	}
	l := startLoadAt(t, 2, "mq", fronts, backs)
	l.waitAcks(t, 50, "jobs flowing")

	placement := func() *emqp.RouteTable {
		tb, _, err := loadTable(etcd.Endpoints())
		if err != nil {
			t.Fatal(err)
		}
		return tb
	}
	hit := map[string]int{}
	for i := range moves {
		from := placement().Owner("mq")
		to := map[string]string{"a": "b", "b": "a"}[from]
		victim, when := []string{from, to}[(i/2)%2], []string{"started", "flipped"}[i%2]
		if i%5 == 4 {
			victim = ""
		}
		done := make(chan error, 1)
		go func() {
			_, stderr, err := emq(t, "", "queues", "place", "mq", to, "--etcd-endpoints", eps)
			if err != nil {
				err = fmt.Errorf("%v: %s", err, stderr)
			}
			done <- err
		}()
		if victim != "" {
			leader := leaderOf(t, brokers[victim]...)
			var state string
			bt.Eventually(t, "the move "+when, func() bool {
				tb := placement()
				m, moving := tb.Moving["mq"]
				switch {
				case when == "started" && moving && !m.Copied:
					state = "copying"
				case moving && m.Copied:
					state = "copied"
				case !moving && tb.Owner("mq") == to:
					state = "ended"
				default:
					return false
				}
				return true
			})
			leader.kill()
			hit[victim+" at "+state]++
			leader.start()
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("move %d, %s to %s: %v", i, from, to, err)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("move %d, %s to %s: not over in 2 minutes", i, from, to)
		}
		if got := placement().Owner("mq"); got != to {
			t.Fatalf("move %d: mq on %s, want %s", i, got, to)
		}
		l.waitAcks(t, 20, fmt.Sprintf("jobs flowing after move %d", i))
	}
	t.Logf("kills: %v", hit)
	t.Cleanup(func() {
		if t.Failed() {
			for _, bs := range brokers {
				for _, b := range bs {
					out, _, _ := emq(t, "", "queues", "--admin", b.admin)
					t.Logf("broker %s: %s\n%s", b.name, out, b.log())
				}
			}
		}
	})
	l.stop()
	tl := l.check(t)
	acked, again := tl.acked, tl.again
	t.Logf("%d moves: %d jobs ACKed, all ran; %d ran more than once", moves, acked, again)
}
