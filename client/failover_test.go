package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	bt "github.com/eventmq/emq/internal/brokertest"
	"github.com/eventmq/emq/worker"
)

// A client and a worker given two brokers' endpoints talk to the one
// that listens, and follow when the other takes over the journal: every
// Send returns without an error and every ACKed job runs (at least once:
// what was in flight at the switch runs again).
func TestFollowsTheBrokerThatAnswers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fa, ba, fb, bb := bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	start := func(frontend, backend string) *bt.Broker {
		return bt.Start(t, dir, func(o *broker.Options) {
			o.Frontend, o.Backend = frontend, backend
			o.HeartbeatInterval, o.HeartbeatTimeout = 50*time.Millisecond, time.Second
		})
	}
	a := start(fa, ba)

	var mu sync.Mutex
	ran := map[string]int{}
	w, err := worker.New(worker.Options{Broker: bb + "," + ba, Concurrency: 4, Logger: bt.Logger(t),
		HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("q", func(_ context.Context, j *worker.Job) ([]byte, error) {
		mu.Lock()
		ran[j.MsgID]++
		mu.Unlock()
		return nil, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	defer func() { cancel(); <-wdone }()

	c, err := client.New(client.Options{Broker: fb + "," + fa, ResendAfter: 500 * time.Millisecond, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const jobs = 300
	var acked []string
	var sendErr error
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for range jobs {
			sctx, scancel := context.WithTimeout(ctx, bt.Wait)
			id, err := c.Send(sctx, "q", []byte("x"))
			scancel()
			mu.Lock()
			if err != nil {
				sendErr = err
				mu.Unlock()
				return
			}
			acked = append(acked, id)
			mu.Unlock()
		}
	}()
	bt.Eventually(t, "jobs ACKed by the first broker", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) >= jobs/3
	})
	if err := a.Stop(); err != nil { // what it holds stays journaled
		t.Fatal(err)
	}
	start(fb, bb) // the other takes the journal over, on its own endpoints
	<-sent
	if sendErr != nil {
		t.Fatalf("Send across the switch: %v", sendErr)
	}
	bt.Eventually(t, "every ACKed job run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range acked {
			if ran[id] == 0 {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	again := 0
	for _, n := range ran {
		again += n - 1
	}
	t.Logf("%d jobs ACKed, %d runs beyond the first (in flight at the switch)", len(acked), again)
}

// A broker that stays connected but says nothing (here a paused proxy in
// front of it: what a SIGSTOPped or frozen leader looks like to its
// peers) is left, with the defaults: the client hedges (or, at the
// latest, dials every endpoint again after HeartbeatTimeout) and its
// Send is ACKed by the broker that took over, instead of waiting on the
// silent connection for as long as it lasts.
func TestLeavesASilentBroker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fa, fb := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	start := func(frontend string) *bt.Broker {
		return bt.Start(t, dir, func(o *broker.Options) { o.Frontend = frontend })
	}
	a := start(fa)
	paused := bt.NewProxy(t, fa)
	c, err := client.New(client.Options{Broker: paused.Endpoint() + "," + fb, Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	if _, err := c.Send(ctx, "q", []byte("before")); err != nil {
		t.Fatal(err)
	}
	paused.Pause()
	if err := a.Stop(); err != nil { // its journal goes to the next; the proxy keeps the client's connection open
		t.Fatal(err)
	}
	start(fb)
	began := time.Now()
	if _, err := c.Send(ctx, "q", []byte("after")); err != nil {
		t.Fatalf("Send while the connected broker is silent: %v", err)
	}
	t.Logf("ACKed by the next broker %v after the Send began (HeartbeatInterval 1 s, HeartbeatTimeout 3 s)", time.Since(began).Round(time.Millisecond))
}

// A subscriber leaves a silent broker the same way: behind a paused
// proxy it dials every endpoint again and receives what the next broker
// publishes.
func TestSubscriberLeavesASilentBroker(t *testing.T) {
	t.Parallel()
	_, took := subscribePastAPause(t, client.SubscriberOptions{})
	t.Logf("received from the next broker %v after it began publishing (HeartbeatInterval 1 s, HeartbeatTimeout 3 s)", took.Round(time.Millisecond))
}

// subscribePastAPause subscribes, with opts, behind a proxy to a broker
// and to the endpoint of a next one; receives what the first publishes,
// pauses the proxy, stops that broker, starts the next, and receives
// what it publishes. It returns the proxy and how long the subscriber
// took to receive from the next broker.
func subscribePastAPause(t *testing.T, opts client.SubscriberOptions) (*bt.Proxy, time.Duration) {
	t.Helper()
	dir := t.TempDir()
	fa, pa, fb, pb := bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	start := func(frontend, pub string) *bt.Broker {
		return bt.Start(t, dir, func(o *broker.Options) { o.Frontend, o.PublisherOutgoing = frontend, pub })
	}
	a := start(fa, pa)
	paused := bt.NewProxy(t, pa)
	opts.Endpoint, opts.Logger = paused.Endpoint()+","+pb, bt.Logger(t)
	s, err := client.Subscribe(opts, "news.")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	receives := func(frontend, text string) {
		t.Helper()
		c, err := client.New(client.Options{Broker: frontend, Logger: bt.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		got := make(chan error, 1)
		go func() {
			for {
				m, err := s.Recv(ctx)
				if err != nil || m.Topic == "news."+text {
					got <- err
					return
				}
			}
		}()
		// Not durable: published again until the subscriber (re)connected has it.
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if err := c.Publish(ctx, "news."+text, []byte(text)); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-got:
				if err != nil {
					t.Fatalf("%s never received: %v", text, err)
				}
				return
			case <-tick.C:
			}
		}
	}
	receives(fa, "before")
	paused.Pause()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	start(fb, pb)
	began := time.Now()
	receives(fb, "after")
	return paused, time.Since(began)
}

// A worker leaves a silent broker too (the defaults: it hedges after
// 1.5 s, and leaves after HeartbeatTimeout, 3 s): it runs the jobs of
// the broker that took over.
func TestWorkerLeavesASilentBroker(t *testing.T) {
	t.Parallel()
	p := workPastAPause(t, 0, worker.Options{})
	t.Logf("run by the worker %v after the next broker had it", p.took.Round(time.Millisecond))
}

// pause is what workPastAPause saw: the proxy in front of the first
// broker, its connections when it fell silent, and how long the worker
// took to run a job of the next broker.
type pause struct {
	proxy  *bt.Proxy
	before int
	took   time.Duration
}

// workPastAPause runs a worker, with opts, behind a proxy to a broker
// and on the endpoint of a next one (both with heartbeat, 0 for the
// default): it runs a job of the first, the proxy pauses, that broker
// stops, the next starts, and the worker runs its job.
func workPastAPause(t *testing.T, heartbeat time.Duration, opts worker.Options) pause {
	t.Helper()
	dir := t.TempDir()
	fa, ba, fb, bb := bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	start := func(frontend, backend string) *bt.Broker {
		return bt.Start(t, dir, func(o *broker.Options) {
			o.Frontend, o.Backend = frontend, backend
			if heartbeat > 0 {
				o.HeartbeatInterval = heartbeat
			}
		})
	}
	a := start(fa, ba)
	p := pause{proxy: bt.NewProxy(t, ba)}
	opts.Broker, opts.Logger = p.proxy.Endpoint()+","+bb, bt.Logger(t)
	w, err := worker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("q", func(_ context.Context, j *worker.Job) ([]byte, error) { return j.Payload, nil })
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	wdone := make(chan error, 1)
	go func() { wdone <- w.Run(ctx) }()
	defer func() { cancel(); <-wdone }()
	run := func(frontend, text string) {
		t.Helper()
		c, err := client.New(client.Options{Broker: frontend, Logger: bt.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if got, err := c.Request(ctx, "q", []byte(text)); err != nil || string(got) != text {
			t.Fatalf("%s: %q %v", text, got, err)
		}
	}
	run(fa, "before")
	p.proxy.Pause()
	p.before = p.proxy.Accepted() // the worker's, and its ask for the placement of shards
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	start(fb, bb)
	began := time.Now()
	run(fb, "after")
	p.took = time.Since(began)
	return p
}

// The hedge: a client connected to a broker that falls silent (behind a
// paused proxy) while a Send waits dials the other endpoints beside its
// connection; when a broker begins to serve there (it took the journal
// over), the client switches to it and resends what waits, same msgids.
// The silence timeout is a minute here: only the hedge can make the
// switch within the test's wait.
func TestHedgesPastASilentBroker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fa, fb := bt.FreeEndpoint(t), bt.FreeEndpoint(t)
	start := func(frontend string) *bt.Broker {
		return bt.Start(t, dir, func(o *broker.Options) { o.Frontend = frontend })
	}
	a := start(fa)
	paused := bt.NewProxy(t, fa)
	c, err := client.New(client.Options{Broker: paused.Endpoint() + "," + fb, Logger: bt.Logger(t),
		HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	if _, err := c.Send(ctx, "q", []byte("before")); err != nil {
		t.Fatal(err)
	}
	paused.Pause()
	if err := a.Stop(); err != nil { // its journal goes to the next; the proxy keeps the client's connection open
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	var during string
	go func() { // sent into the silence, before the next broker serves
		var err error
		during, err = c.Send(ctx, "q", []byte("during"))
		waiting <- err
	}()
	bt.Eventually(t, "the Send's REQUEST sent to the silent broker", func() bool { return paused.Pending() > 0 })
	b := start(fb)
	if err := <-waiting; err != nil {
		t.Fatalf("Send while the connected broker is silent: %v", err)
	}
	if _, err := c.Send(ctx, "q", []byte("after")); err != nil {
		t.Fatal(err)
	}
	if q := bt.QueueInfo(t, b, "q"); q.Pending != 3 {
		t.Fatalf("the next broker has %d jobs, want before, during (%s, resent once it served) and after", q.Pending, during)
	}
	if n := paused.Accepted(); n != 1 {
		t.Fatalf("%d connections to the silent broker, want the first only", n)
	}
}

// With one endpoint there is nothing to hedge to: a broker silent for a
// while (a pause shorter than the silence timeout) keeps its client, on
// the same connection, and the Send waiting is ACKed once it answers.
func TestStaysWithASilentBrokerAlone(t *testing.T) {
	t.Parallel()
	a := bt.Start(t, "", nil)
	paused := bt.NewProxy(t, a.Frontend())
	c, err := client.New(client.Options{Broker: paused.Endpoint(), Logger: bt.Logger(t),
		HeartbeatInterval: 20 * time.Millisecond, HeartbeatTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	if _, err := c.Send(ctx, "q", []byte("before")); err != nil {
		t.Fatal(err)
	}
	paused.Pause()
	waiting := make(chan error, 1)
	go func() { _, err := c.Send(ctx, "q", []byte("during")); waiting <- err }()
	bt.Eventually(t, "the Send's REQUEST sent to the silent broker", func() bool { return paused.Pending() > 0 })
	<-time.After(500 * time.Millisecond) // the pause's length: 25 heartbeat intervals, not a wait for something
	if n := paused.Accepted(); n != 1 {
		t.Fatalf("%d connections during the pause, want the first only", n)
	}
	paused.Resume()
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
	if n := paused.Accepted(); n != 1 {
		t.Fatalf("%d connections, want the first only", n)
	}
	if q := bt.QueueInfo(t, a, "q"); q.Pending != 2 {
		t.Fatalf("%d jobs stored, want 2", q.Pending)
	}
}

// A worker hedges too: its broker silent, it dials the other endpoints
// and, a broker serving there, INFORMs it and runs its jobs, well within
// its silence timeout (a minute here).
func TestWorkerHedgesPastASilentBroker(t *testing.T) {
	t.Parallel()
	p := workPastAPause(t, 50*time.Millisecond, worker.Options{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: time.Minute})
	if n := p.proxy.Accepted(); n != p.before {
		t.Fatalf("%d connections to the silent broker, want the %d before its silence", n, p.before)
	}
}

// A subscriber hedges when its PINGs go unanswered: it switches to the
// broker that serves on another endpoint and receives what it publishes,
// within its silence timeout (a minute here).
func TestSubscriberHedgesPastASilentBroker(t *testing.T) {
	t.Parallel()
	paused, _ := subscribePastAPause(t, client.SubscriberOptions{HeartbeatInterval: 50 * time.Millisecond, HeartbeatTimeout: time.Minute})
	if n := paused.Accepted(); n != 1 {
		t.Fatalf("%d connections to the silent broker, want the first only", n)
	}
}
