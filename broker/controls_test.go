package broker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

func change(t *testing.T, b *bt.Broker, queue string, c broker.QueueChange) store.QueueSettings {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	s, err := b.ChangeQueue(ctx, queue, c)
	if err != nil {
		t.Fatalf("change %s: %v", queue, err)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// queueInfo returns what the broker says of one queue.
// recvJob takes the next REQUEST a worker gets.
func recvJob(t *testing.T, w *bt.Peer) *emqp.Request {
	t.Helper()
	return bt.Expect[*emqp.Request](w)
}

// A paused queue takes and stores jobs, ACKs them, and dispatches none,
// while other queues go on; resumed, it dispatches them in order. The
// pause is kept across a restart.
func TestPausedQueueStoresAndResumesInOrder(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	if s := change(t, b, "q", broker.QueueChange{Paused: ptr(true)}); !s.Paused {
		t.Fatalf("settings after pause: %+v", s)
	}
	client := bt.Dial(t, b.Frontend(), "c")
	var ids []string
	for i := range 5 {
		ids = append(ids, client.Request("q", "", []byte{byte(i)})) // ACKed: stored
	}
	worker := bt.Worker(t, b.Backend(), "w", "q,other")
	worker.Ready(10)
	// A job of another queue reaches the worker, which had free slots all
	// along: nothing of q came first.
	marker := client.Request("other", "", nil)
	if j := recvJob(t, worker); j.MsgID != marker {
		t.Fatalf("the worker got %s of queue %s before the marker: a paused queue dispatched", j.MsgID, j.Queue)
	}
	if q := bt.QueueInfo(t, b, "q"); !q.Paused || q.Pending != 5 || q.InFlight != 0 {
		t.Fatalf("paused queue: %+v", q)
	}

	// Kept across a restart, with its jobs.
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, b.Dir, fast)
	if q := bt.QueueInfo(t, b, "q"); !q.Paused || q.Pending != 5 {
		t.Fatalf("after a restart: %+v", q)
	}
	worker = bt.Worker(t, b.Backend(), "w2", "q")
	worker.Ready(10)
	change(t, b, "q", broker.QueueChange{Paused: ptr(false)})
	for i, id := range ids {
		if j := recvJob(t, worker); j.MsgID != id {
			t.Fatalf("job %d after resume: %s, want %s (FIFO)", i, j.MsgID, id)
		}
	}
}

// At most Concurrency jobs of a queue are in flight, whatever slots its
// workers offer; each one done lets one more go.
func TestConcurrencyLimitHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	change(t, b, "q", broker.QueueChange{Concurrency: ptr(2)})
	client := bt.Dial(t, b.Frontend(), "c")
	workers := make([]*bt.Peer, 3)
	for i := range workers {
		workers[i] = bt.Worker(t, b.Backend(), fmt.Sprintf("w%d", i), "q,marker")
		workers[i].Ready(4)
	}
	for range 8 {
		client.Request("q", "", nil)
	}
	held := map[string]*bt.Peer{} // msgid → the worker holding it
	// take receives jobs until want are held and a marker job, sent after
	// them, has come back: any job of q beyond the limit would have been
	// dispatched before the marker, to a worker with free slots.
	take := func(want int) {
		t.Helper()
		marker := ""
		deadline := time.Now().Add(bt.Wait)
		for {
			if time.Now().After(deadline) {
				t.Fatalf("%d jobs held, want %d; marker back: %v", len(held), want, marker == "back")
			}
			if marker == "" && len(held) >= want {
				marker = client.Request("marker", "", nil)
			}
			for _, w := range workers {
				m, ok := w.TryRecv(5 * time.Millisecond)
				if !ok {
					continue
				}
				j := m.(*emqp.Request)
				if j.Queue == "marker" {
					if j.MsgID == marker {
						marker = "back"
					}
					w.Reply(j.MsgID, nil)
					w.Ready(1)
					continue
				}
				held[j.MsgID] = w
				if len(held) > 2 {
					t.Fatalf("%d jobs of a queue limited to 2 in flight", len(held))
				}
			}
			if marker == "back" && len(held) >= want {
				return
			}
		}
	}
	// In flight: always as many as the limit lets, never more.
	for done := 0; done < 8; done++ {
		want := min(2, 8-done)
		bt.Eventually(t, "the queue's places used", func() bool { return bt.QueueInfo(t, b, "q").InFlight == want })
		take(want)
		if len(held) != want {
			t.Fatalf("%d jobs held with %d of 8 done, want %d (limit 2)", len(held), done, want)
		}
		for id, w := range held { // finish one
			w.Reply(id, nil)
			w.Ready(1)
			delete(held, id)
			break
		}
	}
	bt.Eventually(t, "every job done", func() bool { return bt.QueueInfo(t, b, "q").InFlight == 0 })
	if q := bt.QueueInfo(t, b, "q"); q.Concurrency != 2 || q.Pending != 0 {
		t.Fatalf("queue at the end: %+v", q)
	}
}

// Config defaults apply to queues with nothing stored; a stored change
// wins over them, also after a restart; bad defaults name their key.
func TestQueueDefaultsAndStoredControls(t *testing.T) {
	t.Parallel()
	withDefaults := func(o *broker.Options) {
		fast(o)
		o.Queues = map[string]store.QueueSettings{"a": {Concurrency: 3}, "b": {Rate: 5, Burst: 2}}
	}
	b := bt.Start(t, "", withDefaults)
	if q := bt.QueueInfo(t, b, "a"); q.Concurrency != 3 {
		t.Fatalf("default of a: %+v", q)
	}
	if s := change(t, b, "a", broker.QueueChange{Concurrency: ptr(0)}); s.Concurrency != 0 {
		t.Fatalf("a after setting no limit: %+v", s)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, b.Dir, withDefaults)
	if qs, _ := b.Queues(context.Background()); len(qs) != 1 || qs[0].Name != "b" || qs[0].Rate != 5 || qs[0].Burst != 2 {
		t.Fatalf("after a restart, a's stored no-limit should win over its default, b keep its own: %+v", qs)
	}

	ctx := context.Background()
	if _, err := b.ChangeQueue(ctx, "a", broker.QueueChange{Rate: ptr(-1.0)}); !errors.Is(err, store.ErrBadSettings) || !strings.Contains(err.Error(), "rate") {
		t.Fatalf("a negative rate: %v", err)
	}
	o := broker.DefaultOptions()
	o.DataDir = t.TempDir()
	o.Queues = map[string]store.QueueSettings{"x": {Concurrency: -2}}
	if err := o.Validate(); err == nil || !strings.Contains(err.Error(), "queues.x") || !strings.Contains(err.Error(), "concurrency") {
		t.Fatalf("a bad default: %v", err)
	}
}

// The admin API pauses, resumes and sets limits, answers with the
// queue's controls, refuses bad settings naming them, and /metrics shows
// them.
func TestQueueControlsAPI(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fast, nil)
	post := func(path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+b.AdminAddr()+path, bytes.NewBufferString(body))
		req.Header.Set(admin.Header, "test")
		resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	var qi broker.QueueInfo
	if code, body := post("/api/v1/queues/mail/pause", ""); code != 200 || json.Unmarshal([]byte(body), &qi) != nil || !qi.Paused {
		t.Fatalf("pause: %d %s", code, body)
	}
	if code, body := post("/api/v1/queues/mail/settings", `{"concurrency": 4, "rate": 2.5}`); code != 200 ||
		json.Unmarshal([]byte(body), &qi) != nil || !qi.Paused || qi.Concurrency != 4 || qi.Rate != 2.5 {
		t.Fatalf("settings: %d %s", code, body)
	}
	if code, body := post("/api/v1/queues/mail/resume", ""); code != 200 || json.Unmarshal([]byte(body), &qi) != nil || qi.Paused || qi.Concurrency != 4 {
		t.Fatalf("resume: %d %s", code, body)
	}
	for body, want := range map[string]string{
		`{"burst": -3}`:        "burst",
		`{"concurency": 3}`:    "concurency",
		`not json`:             "JSON",
		`{"rate": 10000000}`:   "rate",
		`{"concurrency": "x"}`: "concurrency",
	} {
		if code, out := post("/api/v1/queues/mail/settings", body); code != 400 || !strings.Contains(out, want) {
			t.Errorf("settings %s: %d %s, want 400 naming %s", body, code, out, want)
		}
	}
	if q := bt.QueueInfo(t, b, "mail"); q.Paused || q.Concurrency != 4 || q.Rate != 2.5 {
		t.Fatalf("after the refusals: %+v", q)
	}
	families := bt.ScrapeMetrics(t, b)
	for name, want := range map[string]float64{"emq_queue_paused": 0, "emq_queue_concurrency_limit": 4, "emq_queue_rate_limit": 2.5} {
		f := families[name]
		if f == nil || len(f.Metric) != 1 || f.Metric[0].GetGauge().GetValue() != want {
			t.Errorf("%s: %v, want %g for mail", name, f, want)
		}
	}
}

// Controls the API answered for are stored: a broker killed with SIGKILL
// right after comes back with them, and its paused queue's jobs wait.
func TestControlsSurviveSIGKILL(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	frontend, backend := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	adminAddr := strings.TrimPrefix(bt.FreeEndpoint(t), "tcp://")
	c := startChild(t, dir, frontend, backend, "EMQ_TEST_ADMIN="+adminAddr)
	client := bt.Dial(t, frontend, "c")
	post := func(path, body string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+adminAddr+path, bytes.NewBufferString(body))
		req.Header.Set(admin.Header, "test")
		resp, err := (&http.Client{Timeout: bt.Wait}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d", path, resp.StatusCode)
		}
	}
	post("/api/v1/queues/q/pause", "")
	post("/api/v1/queues/limited/settings", `{"concurrency": 2, "rate": 7.5, "burst": 4}`)
	id := client.Request("q", "", []byte("held"))
	c.kill()

	b := bt.Start(t, dir, fast)
	if q := bt.QueueInfo(t, b, "q"); !q.Paused || q.Pending != 1 {
		t.Fatalf("q after SIGKILL: %+v", q)
	}
	if q := bt.QueueInfo(t, b, "limited"); q.Concurrency != 2 || q.Rate != 7.5 || q.Burst != 4 {
		t.Fatalf("limited after SIGKILL: %+v", q)
	}
	worker := bt.Worker(t, b.Backend(), "w", "q")
	worker.Ready(1)
	change(t, b, "q", broker.QueueChange{Paused: ptr(false)})
	if j := recvJob(t, worker); j.MsgID != id {
		t.Fatalf("after resume: %s, want %s", j.MsgID, id)
	}
}

// The least rate holds its queue back for a long while without holding
// back the broker's other deadlines: a delayed job of another queue
// comes due.
func TestLeastRateLeavesOtherDeadlines(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	change(t, b, "slow", broker.QueueChange{Rate: ptr(store.MinRate)})
	client := bt.Dial(t, b.Frontend(), "c")
	worker := bt.Worker(t, b.Backend(), "w", "slow,other")
	worker.Ready(3)
	first := client.Request("slow", "", nil) // the bucket's one token
	if j := recvJob(t, worker); j.MsgID != first {
		t.Fatalf("got %s, want %s", j.MsgID, first)
	}
	client.Request("slow", "", nil) // a token in 1,000 s
	delayed := client.Request("other", "delay:1", nil)
	if j := recvJob(t, worker); j.MsgID != delayed {
		t.Fatalf("got %s (%s), want the delayed job of another queue", j.MsgID, j.Queue)
	}
	if _, err := b.ChangeQueue(t.Context(), "slow", broker.QueueChange{Rate: ptr(1e-11)}); !errors.Is(err, store.ErrBadSettings) {
		t.Fatalf("a rate below the least: %v", err)
	}
}
