package broker_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/client"
	"github.com/eventmq/emq/emqp"
	bt "github.com/eventmq/emq/internal/brokertest"
)

func subscribe(t *testing.T, b *bt.Broker, prefixes ...string) *client.Subscriber {
	t.Helper()
	s, err := client.Subscribe(client.SubscriberOptions{Endpoint: b.PublisherOutgoing(), Logger: bt.Logger(t)}, prefixes...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// recvUntil publishes (topic, "probe") through publish until s receives a
// probe: subscriptions are taken asynchronously, as in ZeroMQ.
func waitSubscribed(t *testing.T, s *client.Subscriber, publish func(topic string, payload []byte), topic string) {
	t.Helper()
	deadline := time.Now().Add(bt.Wait)
	for time.Now().Before(deadline) {
		publish(topic, []byte("probe"))
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		m, err := s.Recv(ctx)
		cancel()
		if err == nil && string(m.Payload) == "probe" {
			// Drain other probes already on their way.
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
				_, err := s.Recv(ctx)
				cancel()
				if err != nil {
					return
				}
			}
		}
	}
	t.Fatalf("the subscription to %q never took effect", topic)
}

func recvMsg(t *testing.T, s *client.Subscriber) client.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bt.Wait)
	defer cancel()
	m, err := s.Recv(ctx)
	if err != nil {
		t.Fatalf("no published message: %v", err)
	}
	return m
}

// PUBLISH on the frontend and on publisher-incoming reaches subscribers by
// prefix, as [topic, message]; nothing is stored and nothing is ACKed.
func TestPublishReachesSubscribers(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	orders := subscribe(t, b, "orders.")
	all := subscribe(t, b, "")
	front := bt.Dial(t, b.Frontend(), "")
	in := bt.Dial(t, b.PublisherIncoming(), "")
	pub := func(p *bt.Peer) func(string, []byte) {
		return func(topic string, payload []byte) {
			p.Send(&emqp.Publish{MsgID: emqp.NewID(), Topic: topic, Message: payload})
		}
	}
	waitSubscribed(t, orders, pub(front), "orders.x")
	waitSubscribed(t, all, pub(front), "x")

	pub(front)("orders.eu", []byte("from the frontend"))
	pub(in)("orders.us", []byte("from publisher-incoming"))
	pub(front)("users.new", []byte{0, 0xff}) // binary, not for orders.
	// Two connections: their messages may interleave either way.
	gotOrders := map[string]bool{}
	for range 2 {
		m := recvMsg(t, orders)
		gotOrders[m.Topic+"="+string(m.Payload)] = true
	}
	if !gotOrders["orders.eu=from the frontend"] || !gotOrders["orders.us=from publisher-incoming"] {
		t.Fatalf("orders.: %v", gotOrders)
	}
	got := map[string]bool{}
	for range 3 {
		m := recvMsg(t, all)
		got[m.Topic+"="+string(m.Payload)] = true
	}
	if !got["users.new=\x00\xff"] || len(got) != 3 {
		t.Fatalf("everything: %v", got)
	}
	if m, ok := front.TryRecv(100 * time.Millisecond); ok {
		t.Fatalf("PUBLISH is not answered, got %s", m.Command())
	}
	if n := b.Stats().Acked; n != 0 {
		t.Fatalf("a PUBLISH was journaled: %d", n)
	}
}

// A malformed PUBLISH gets ERROR on either endpoint; publisher-incoming
// refuses what is not PUBLISH; a message no subscriber queue could hold is
// too_large.
func TestPublishRefusals(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.PublisherBuffer = 1 << 20 })
	for _, ep := range []string{b.Frontend(), b.PublisherIncoming()} {
		p := bt.Dial(t, ep, "")
		p.SendFrames([]byte{}, []byte(emqp.Version), []byte("PUBLISH"), []byte("m1"), []byte("topic"))
		if e := bt.Expect[*emqp.Error](p); e.Code != emqp.CodeBadRequest || e.RefMsgID != "m1" || !strings.Contains(e.Text, "PUBLISH needs 6 frames") {
			t.Fatalf("%s: %+v", ep, e)
		}
		p.Send(&emqp.Publish{MsgID: "m2", Topic: "t", Message: make([]byte, 300<<10)})
		if e := bt.Expect[*emqp.Error](p); e.Code != emqp.CodeTooLarge || e.RefMsgID != "m2" || !strings.Contains(e.Text, "publisher-buffer") {
			t.Fatalf("%s: %+v", ep, e)
		}
	}
	p := bt.Dial(t, b.PublisherIncoming(), "")
	p.Send(&emqp.Request{MsgID: "m4", Queue: "q", Payload: []byte("a job")})
	if e := bt.Expect[*emqp.Error](p); e.Code != emqp.CodeBadRequest || e.RefMsgID != "m4" || !strings.Contains(e.Text, "PUBLISH only") {
		t.Fatalf("a REQUEST on publisher-incoming: %+v", e)
	}
	if n := b.Stats().Acked; n != 0 {
		t.Fatalf("publisher-incoming stored a job: %d", n)
	}

	off := bt.Start(t, "", func(o *broker.Options) { o.PublisherIncoming, o.PublisherOutgoing = "", "" })
	p = bt.Dial(t, off.Frontend(), "")
	p.Send(&emqp.Publish{MsgID: "m3", Topic: "t"})
	if e := bt.Expect[*emqp.Error](p); e.Code != emqp.CodeUnavailable || !strings.Contains(e.Text, "publisher-outgoing") {
		t.Fatalf("pub/sub off: %+v", e)
	}
}

// client.Publish and client.Subscriber, with Add and Remove.
func TestClientPublishSubscribe(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", nil)
	c, err := client.New(client.Options{Broker: b.Frontend(), Logger: bt.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	publish := func(topic string, payload []byte) {
		if err := c.Publish(ctx, topic, payload); err != nil {
			t.Fatal(err)
		}
	}
	s := subscribe(t, b, "a")
	waitSubscribed(t, s, publish, "a")
	if err := s.Add("b"); err != nil {
		t.Fatal(err)
	}
	waitSubscribed(t, s, publish, "b")
	if err := s.Remove("a"); err != nil {
		t.Fatal(err)
	}
	// Once "a" is gone, an "a" published before a "b" is not received.
	deadline := time.Now().Add(bt.Wait)
	for {
		publish("a", []byte("gone?"))
		publish("b", []byte("marker"))
		if m := recvMsg(t, s); m.Topic == "b" {
			break
		}
		recvMsg(t, s) // its marker
		if time.Now().After(deadline) {
			t.Fatal("Remove did not cancel the subscription")
		}
	}
	for i := range 100 {
		publish("b", []byte(fmt.Sprint(i)))
	}
	for i := range 100 {
		if m := recvMsg(t, s); string(m.Payload) != fmt.Sprint(i) {
			t.Fatalf("message %d: %q; one publisher's messages come in order", i, m.Payload)
		}
	}
}

// A Subscriber reconnects to a restarted broker and subscribes again.
func TestSubscriberReconnects(t *testing.T) {
	t.Parallel()
	out := bt.FreeEndpoint(t)
	opts := func(o *broker.Options) { o.PublisherOutgoing = out }
	b := bt.Start(t, "", opts)
	s := subscribe(t, b, "t")
	front := bt.Dial(t, b.Frontend(), "")
	pub := func(p *bt.Peer) func(string, []byte) {
		return func(topic string, payload []byte) {
			p.Send(&emqp.Publish{MsgID: emqp.NewID(), Topic: topic, Message: payload})
		}
	}
	waitSubscribed(t, s, pub(front), "t")
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	b2 := bt.Start(t, b.Dir, opts)
	waitSubscribed(t, s, pub(bt.Dial(t, b2.Frontend(), "")), "t")
}

// Original EventMQ peers, unchanged: its client's send_publish_request
// frames from a libzmq DEALER, to either address, reach plain pyzmq SUB
// sockets, prefix matching and unsubscribing as libzmq does it.
func TestInteropLibzmqPubSub(t *testing.T) {
	t.Parallel()
	python := pythonZMQ(t)
	b := bt.Start(t, "", nil)
	out, err := exec.Command(python, "testdata/interop_pubsub.py", b.Frontend(), b.PublisherIncoming(), b.PublisherOutgoing()).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("interop_pubsub.py: %v\n%s", err, out)
	}
}

// With --publisher-last-value a new subscriber first gets the latest
// message of each topic it matches.
func TestPublisherLastValue(t *testing.T) {
	t.Parallel()
	b := bt.Start(t, "", func(o *broker.Options) { o.PublisherLastValue = true })
	front := bt.Dial(t, b.Frontend(), "")
	for _, m := range []struct{ topic, msg string }{{"price.a", "1"}, {"price.a", "2"}, {"price.b", "7"}, {"other", "x"}} {
		front.Send(&emqp.Publish{MsgID: emqp.NewID(), Topic: m.topic, Message: []byte(m.msg)})
	}
	// The PUBLISHes are fanned out by their reader: wait until all four are.
	deadline := time.Now().Add(bt.Wait)
	for b.PubSub().Published < 4 {
		if time.Now().After(deadline) {
			t.Fatal("the PUBLISHes did not arrive")
		}
		time.Sleep(time.Millisecond)
	}
	s := subscribe(t, b, "price.")
	got := map[string]string{}
	for range 2 {
		m := recvMsg(t, s)
		got[m.Topic] = string(m.Payload)
	}
	if got["price.a"] != "2" || got["price.b"] != "7" {
		t.Fatalf("cached values: %v", got)
	}
}

// The stats API has pub/sub's counters when it is on.
func TestPubSubInStats(t *testing.T) {
	t.Parallel()
	b := bt.StartAdmin(t, "", fast, nil)
	s := subscribe(t, b, "")
	front := bt.Dial(t, b.Frontend(), "")
	waitSubscribed(t, s, func(topic string, payload []byte) {
		front.Send(&emqp.Publish{MsgID: emqp.NewID(), Topic: topic, Message: payload})
	}, "x")
	var si admin.StatsInfo
	if code := bt.API(t, b, "GET", "/api/v1/stats", "", &si); code != 200 {
		t.Fatalf("stats: %d", code)
	}
	if si.Get("pubsub_published") < 1 || si.Get("pubsub_delivered") < 1 || si.Get("pubsub_subscribers") != 1 {
		t.Fatalf("pub/sub in stats: %+v", si.Counters)
	}
}
