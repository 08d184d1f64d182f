package broker_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/store"
)

func changeTenant(t *testing.T, b *bt.Broker, queue, tenant string, c broker.TenantChange) store.TenantSettings {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	s, err := b.ChangeTenant(ctx, queue, tenant, c)
	if err != nil {
		t.Fatalf("change tenant %s of %s: %v", tenant, queue, err)
	}
	return s
}

func setLimiter(t *testing.T, b *bt.Broker, name string, s store.LimiterSettings) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	if err := b.SetLimiter(ctx, name, s); err != nil {
		t.Fatalf("set limiter %s: %v", name, err)
	}
}

func tenantOf(r *emqp.Request) string {
	name, _ := r.Headers.Tenant()
	return name
}

// sent is a job the tests send: its tenant, priority and msgid.
type sent struct {
	tenant string
	prio   int
	id     string
}

// modelOrder is the order a single worker taking one job at a time must
// get sent's jobs in, written plainly: lower priority first; among one
// priority, the tenants in the order their first job came, each turn
// giving up to the tenant's weight of its jobs; FIFO within a tenant.
func modelOrder(jobs []sent, weight map[string]int) []string {
	var out []string
	prios := map[int]bool{}
	for _, j := range jobs {
		prios[j.prio] = true
	}
	var ps []int
	for p := range prios {
		ps = append(ps, p)
	}
	slices.Sort(ps)
	for _, p := range ps {
		var ring []string
		lanes := map[string][]string{}
		for _, j := range jobs {
			if j.prio != p {
				continue
			}
			if _, ok := lanes[j.tenant]; !ok {
				ring = append(ring, j.tenant)
			}
			lanes[j.tenant] = append(lanes[j.tenant], j.id)
		}
		for len(ring) > 0 {
			var next []string
			for _, tn := range ring {
				n := min(max(1, weight[tn]), len(lanes[tn]))
				out = append(out, lanes[tn][:n]...)
				if lanes[tn] = lanes[tn][n:]; len(lanes[tn]) > 0 {
					next = append(next, tn)
				}
			}
			ring = next
		}
	}
	return out
}

// Tenants take turns, weighted, within a priority; priorities come
// first; FIFO within a tenant; jobs without a tenant are one tenant. The
// order and the weights hold across a restart.
func TestTenantsTakeTurnsByWeight(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	change(t, b, "q", broker.QueueChange{Paused: ptr(true)})
	weight := map[string]int{"big": 3, "mid": 2}
	for name, w := range weight {
		changeTenant(t, b, "q", name, broker.TenantChange{Weight: ptr(w)})
	}
	client := bt.Dial(t, b.Frontend(), "c")
	var jobs []sent
	send := func(tenant string, prio, n int) {
		for range n {
			h := fmt.Sprintf("priority:%d", prio)
			if tenant != "" {
				h += ",tenant:" + tenant
			}
			jobs = append(jobs, sent{tenant, prio, client.Request("q", h, nil)})
		}
	}
	send("big", 1024, 20)
	send("small", 1024, 3)
	send("", 1024, 4)
	send("mid", 1024, 6)
	send("small", 1024, 2)
	send("late", 0, 3) // a lower priority value runs first, whoever sent it
	send("big", 0, 2)
	want := modelOrder(jobs, weight)

	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, b.Dir, fast)
	change(t, b, "q", broker.QueueChange{Paused: ptr(false)})
	w := bt.Worker(t, b.Backend(), "w", "q")
	for i, id := range want {
		w.Ready(1)
		j := recvJob(t, w)
		if j.MsgID != id {
			got := slices.Index(want, j.MsgID)
			t.Fatalf("dispatch %d: job %d of the model's order (tenant %q), want job %d", i, got, tenantOf(j), i)
		}
		w.Reply(j.MsgID, nil)
	}
}

// heldCounter is a set of workers that keep every job they get, so that
// a test can tell what the broker lets run at once.
type heldCounter struct {
	t       *testing.T
	b       *bt.Broker
	replies int64 // sent, markers' too
	client  *bt.Peer
	workers []*bt.Peer
	held    map[string]*emqp.Request
	holder  map[string]*bt.Peer
}

// settle receives until a marker job, sent now on queue marker, comes
// back: every job the broker would dispatch to the free slots is held by
// then.
func (h *heldCounter) settle() {
	h.t.Helper()
	// Every REPLY handled first: a job it frees goes out in that turn.
	bt.Eventually(h.t, "the replies handled", func() bool { return h.b.Stats().Replied >= h.replies })
	marker := h.client.Request("marker", "", nil)
	deadline := time.Now().Add(bt.Wait)
	for time.Now().Before(deadline) {
		for _, w := range h.workers {
			m, ok := w.TryRecv(5 * time.Millisecond)
			if !ok {
				continue
			}
			j := m.(*emqp.Request)
			if j.Queue == "marker" {
				w.Reply(j.MsgID, nil)
				h.replies++
				w.Ready(1)
				if j.MsgID == marker {
					return
				}
				continue
			}
			h.held[j.MsgID], h.holder[j.MsgID] = j, w
		}
	}
	h.t.Fatal("the marker job did not come back")
}

// count counts the held jobs by what key says of each.
func (h *heldCounter) count(key func(*emqp.Request) string) map[string]int {
	n := map[string]int{}
	for _, j := range h.held {
		n[key(j)]++
	}
	return n
}

// finish replies to one held job that pick chooses.
func (h *heldCounter) finish(pick func(*emqp.Request) bool) {
	h.t.Helper()
	for id, j := range h.held {
		if pick(j) {
			w := h.holder[id]
			w.Reply(id, nil)
			h.replies++
			w.Ready(1)
			delete(h.held, id)
			delete(h.holder, id)
			return
		}
	}
	h.t.Fatal("no held job to finish")
}

func newHeld(t *testing.T, b *bt.Broker, queues string, workers, slots int) *heldCounter {
	h := &heldCounter{t: t, b: b, client: bt.Dial(t, b.Frontend(), "c"), held: map[string]*emqp.Request{}, holder: map[string]*bt.Peer{}}
	for i := range workers {
		w := bt.Worker(t, b.Backend(), fmt.Sprintf("w%d", i), queues+",marker")
		w.Ready(slots)
		h.workers = append(h.workers, w)
	}
	return h
}

// A tenant never has more jobs in flight than its concurrency (its own,
// else the queue's default for tenants), whatever slots the workers
// offer; the others run meanwhile, and each job done lets one more of its
// tenant go.
func TestTenantConcurrencyIsNeverExceeded(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	change(t, b, "q", broker.QueueChange{TenantConcurrency: ptr(2)})
	changeTenant(t, b, "q", "b", broker.TenantChange{Concurrency: ptr(1)})
	changeTenant(t, b, "q", "free", broker.TenantChange{Concurrency: ptr(0)}) // its own: no limit
	h := newHeld(t, b, "q", 1, 30)                                            // one connection: what comes before the marker is read before it
	for range 8 {
		h.client.Request("q", "tenant:a", nil)
		h.client.Request("q", "tenant:b", nil)
	}
	for range 4 {
		h.client.Request("q", "tenant:free", nil)
	}
	limit := map[string]int{"a": 2, "b": 1, "free": 4}
	left := map[string]int{"a": 8, "b": 8, "free": 4}
	for done := 0; ; done++ {
		h.settle()
		n := h.count(tenantOf)
		for name, most := range limit {
			if want := min(most, left[name]); n[name] != want {
				t.Fatalf("after %d done: tenant %s holds %d jobs, want %d (all: %v)", done, name, n[name], want, n)
			}
		}
		if len(h.held) == 0 {
			return
		}
		name := []string{"a", "b", "free"}[done%3]
		if n[name] == 0 {
			for name = range n {
				break
			}
		}
		h.finish(func(j *emqp.Request) bool { return tenantOf(j) == name })
		left[name]--
	}
}

// A named limiter bounds the jobs that name it across every queue, and
// only those: the others run. A REQUEST naming a limiter no one made is
// refused, naming it.
func TestLimiterSharedByTwoQueues(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	setLimiter(t, b, "api", store.LimiterSettings{Concurrency: 2})
	setLimiter(t, b, "db", store.LimiterSettings{Concurrency: 100})
	h := newHeld(t, b, "q1,q2", 1, 30)
	for range 4 {
		h.client.Request("q1", "limit:api", nil)
		h.client.Request("q2", "limit:api;db", nil)
		h.client.Request("q1", "", nil)
	}
	bad := emqp.NewID()
	h.client.Send(&emqp.Request{MsgID: bad, Queue: "q1", Headers: mustHeaders(t, "limit:apii"), Payload: nil})
	if e := bt.Expect[*emqp.Error](h.client); e.RefMsgID != bad || e.Code != emqp.CodeBadRequest || !strings.Contains(e.Text, `"apii"`) {
		t.Fatalf("a REQUEST naming no limiter got %+v, want bad_request naming it", e)
	}
	limited := func(j *emqp.Request) string {
		names, _ := j.Headers.Limits()
		return strings.Join(names, ";")
	}
	total := 8
	for done := 0; done < total; done++ {
		h.settle()
		n := h.count(limited)
		if got, want := n["api"]+n["api;db"], min(2, total-done); got != want {
			t.Fatalf("after %d of %d done: %d jobs naming the limiter held, want %d (%v)", done, total, got, want, n)
		}
		if done == 0 && n[""] != 4 {
			t.Fatalf("%d jobs naming no limiter held, want all 4: the limiter held them back", n[""])
		}
		h.finish(func(j *emqp.Request) bool { return limited(j) != "" })
	}
}

// A tenant's rate holds over ten seconds, within 10 %, while another
// tenant of the queue runs unlimited.
func TestTenantRateHoldsOverTenSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("takes ten seconds")
	}
	t.Parallel()
	const rate = 20.0
	b := bt.Start(t, "", fast)
	changeTenant(t, b, "q", "slow", broker.TenantChange{Rate: ptr(rate), Burst: ptr(1)})
	client := bt.Dial(t, b.Frontend(), "c")
	for range 400 {
		client.Request("q", "tenant:slow", nil)
	}
	for range 50 {
		client.Request("q", "tenant:fast", nil)
	}
	w := bt.Worker(t, b.Backend(), "w", "q")
	w.Ready(64)
	var first time.Time
	slow, fastDone := 0, 0
	for {
		j := recvJob(t, w)
		now := time.Now()
		if tenantOf(j) == "fast" {
			fastDone++
		} else {
			if first.IsZero() {
				first = now
			}
			if now.Sub(first) > 10*time.Second {
				break
			}
			slow++
		}
		w.Reply(j.MsgID, nil)
		w.Ready(1)
	}
	if want := 1 + rate*10; float64(slow) < want*0.9 || float64(slow) > want*1.1 {
		t.Fatalf("%d jobs of a tenant limited to %g a second ran in 10 s, want %.0f ± 10 %%", slow, rate, want)
	}
	if fastDone != 50 {
		t.Fatalf("%d of the other tenant's 50 jobs ran meanwhile", fastDone)
	}
}

// Tenants' settings, queue defaults for tenants and limiters are in the
// journal: a restart keeps them.
func TestFlowSettingsSurviveRestart(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", fast)
	change(t, b, "q", broker.QueueChange{TenantConcurrency: ptr(3), TenantRate: ptr(5.0), TenantBurst: ptr(2)})
	changeTenant(t, b, "q", "acme", broker.TenantChange{Concurrency: ptr(7), Weight: ptr(4)})
	changeTenant(t, b, "q", "", broker.TenantChange{Weight: ptr(2)})
	setLimiter(t, b, "api", store.LimiterSettings{Concurrency: 2, Rate: 25, Burst: 5})
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, b.Dir, fast)
	ctx := context.Background()
	page, err := b.Tenants(ctx, "q", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]broker.TenantInfo{}
	for _, ti := range page.Tenants {
		got[ti.Name] = ti
	}
	if a := got["acme"]; a.Concurrency != 7 || a.Weight != 4 || a.Rate != 5 || a.Burst != 2 {
		t.Fatalf("tenant acme after a restart: %+v", a)
	}
	if e := got[""]; e.Weight != 2 || e.Concurrency != 3 {
		t.Fatalf("the tenant of jobs without one after a restart: %+v", e)
	}
	ls, err := b.Limiters(ctx)
	if err != nil || len(ls) != 1 || ls[0].Name != "api" || ls[0].Concurrency != 2 || ls[0].Rate != 25 || ls[0].Burst != 5 {
		t.Fatalf("limiters after a restart: %+v %v", ls, err)
	}
	if err := b.RemoveLimiter(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b = bt.Start(t, b.Dir, fast)
	if ls, err := b.Limiters(ctx); err != nil || len(ls) != 0 {
		t.Fatalf("limiters after removing the last and a restart: %+v %v", ls, err)
	}
}
