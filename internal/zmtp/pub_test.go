package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

func listenPub(t *testing.T, opts PubOptions) *Pub {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = testLogger(t)
	}
	p, err := ListenPub("tcp://127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// dialSub connects a SUB and subscribes to each prefix, waiting until the
// Pub has them all.
func dialSub(t *testing.T, p *Pub, prefixes ...string) *Conn {
	t.Helper()
	before := p.Stats().Subscriptions
	c, err := Dial(context.Background(), p.Endpoint(), DialOptions{Sub: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, pre := range prefixes {
		if err := c.WriteMsgs([][]byte{append([]byte{1}, pre...)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "the subscriptions arrived", func() bool { return p.Stats().Subscriptions >= before+int64(len(prefixes)) })
	return c
}

// recvTopics reads n messages and returns them as "topic=message".
func recvTopics(t *testing.T, c *Conn, n int) []string {
	t.Helper()
	var got []string
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	for len(got) < n {
		f, err := c.ReadMsg()
		if err != nil {
			t.Fatalf("after %q: %v", got, err)
		}
		if len(f) != 2 {
			t.Fatalf("a published message has 2 frames, got %q", f)
		}
		got = append(got, string(f[0])+"="+string(f[1]))
	}
	return got
}

func TestPrefixSubscriptions(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{})
	orders := dialSub(t, p, "orders.")
	both := dialSub(t, p, "orders.eu", "users")
	all := dialSub(t, p, "")
	for _, topic := range []string{"orders.us", "users.new", "orders.eu.1", "other"} {
		p.Publish([]byte(topic), []byte("m"))
	}
	p.Publish([]byte("orders.end"), []byte("m"))
	if got := strings.Join(recvTopics(t, orders, 3), " "); got != "orders.us=m orders.eu.1=m orders.end=m" {
		t.Fatalf("orders.: %s", got)
	}
	if got := strings.Join(recvTopics(t, both, 2), " "); got != "users.new=m orders.eu.1=m" {
		t.Fatalf("orders.eu + users: %s", got)
	}
	if got := strings.Join(recvTopics(t, all, 5), " "); got != "orders.us=m users.new=m orders.eu.1=m other=m orders.end=m" {
		t.Fatalf("everything: %s", got)
	}
}

// As libzmq's PUB: a connection's prefixes are a set, so the same one
// twice is one subscription and one cancel removes it; cancelling what is
// not subscribed changes nothing.
func TestSubscriptionsAreASet(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{})
	c := dialSub(t, p, "a", "b")
	for _, m := range []string{"\x01a", "\x00zz", "\x00a", "\x01c", "\x01d"} {
		if err := c.WriteMsgs([][]byte{[]byte(m)}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, "subscriptions b, c and d", func() bool { return p.Stats().Subscriptions == 3 })
	p.Publish([]byte("a1"), []byte("x"))
	p.Publish([]byte("c1"), []byte("x"))
	if got := recvTopics(t, c, 1); got[0] != "c1=x" {
		t.Fatalf("after a, a, cancel a: %q", got)
	}
}

// A prefix longer than any topic is not kept; every subscriber's prefixes
// together have a byte limit.
func TestSubscriptionBytes(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{MaxSubscriptionBytes: 100})
	c := dialSub(t, p, strings.Repeat("x", 60))
	_ = c.WriteMsgs([][]byte{append([]byte{1}, strings.Repeat("y", MaxPrefix+1)...)}) // ignored
	_ = c.WriteMsgs([][]byte{append([]byte{1}, strings.Repeat("z", 60)...)})          // over 100 bytes
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.ReadMsg(); err == nil {
		t.Fatal("a subscription past MaxSubscriptionBytes should disconnect")
	}
	testutil.Eventually(t, "the subscriber gone", func() bool { s := p.Stats(); return s.Subscribers == 0 && s.Subscriptions == 0 })
}

// ZMTP 3.1 subscribes with commands, not messages.
func TestSubscribeAndCancelCommands(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{})
	c := dialSub(t, p)
	if err := c.writeCommand("SUBSCRIBE", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := c.writeCommand("SUBSCRIBE", []byte("y")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "two SUBSCRIBEs", func() bool { return p.Stats().Subscriptions == 2 })
	if err := c.writeCommand("CANCEL", []byte("x")); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "a CANCEL", func() bool { return p.Stats().Subscriptions == 1 })
	p.Publish([]byte("x1"), []byte("no"))
	p.Publish([]byte("y1"), []byte("yes"))
	if got := recvTopics(t, c, 1); got[0] != "y1=yes" {
		t.Fatalf("got %q", got)
	}
}

// A subscriber that stops reading loses its own messages past its HWM;
// the publisher never waits and the others receive everything.
func TestStuckSubscriberIsContained(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{HWM: 100, WriteTimeout: time.Hour})
	stuck := dialSub(t, p, "")
	_ = stuck // never read
	fast := dialSub(t, p, "")
	const n = 20000
	payload := []byte(strings.Repeat("p", 1000)) // fills the stuck socket's buffers quickly
	var got atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = fast.SetReadDeadline(time.Now().Add(30 * time.Second))
		for got.Load() < n {
			if _, err := fast.ReadMsg(); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	for i := range n {
		p.Publish([]byte("t"), payload)
		if i%50 == 49 { // within the fast reader's HWM: it misses nothing
			testutil.Eventually(t, "the reading subscriber caught up", func() bool { return got.Load() == int64(i+1) })
		}
	}
	<-done
	if got.Load() != n {
		t.Fatalf("the reading subscriber got %d of %d", got.Load(), n)
	}
	if s := p.Stats(); s.Dropped == 0 || s.QueuedBytes > 2*100*1012 { // its queue and the batch its writer holds
		t.Fatalf("the stuck subscriber's messages should be dropped past its HWM: %+v", s)
	}
}

func TestLastValueCache(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{LastValue: true, LastValueTopics: 2})
	p.Publish([]byte("price.a"), []byte("1"))
	p.Publish([]byte("price.a"), []byte("2"))
	p.Publish([]byte("price.b"), []byte("7"))
	p.Publish([]byte("other"), []byte("o"))
	p.Publish([]byte("price.c"), []byte("9")) // the cache holds 2 topics: a goes
	c := dialSub(t, p, "price.")
	p.Publish([]byte("price.b"), []byte("8"))
	if got := strings.Join(recvTopics(t, c, 2), " "); got != "price.c=9 price.b=8" {
		t.Fatalf("a new subscription gets the cached topics it matches, then what is new: %s", got)
	}
	if s := p.Stats(); s.LastValues != 2 {
		t.Fatalf("cached topics: %d", s.LastValues)
	}
}

func TestLastValueCacheBytes(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{LastValue: true, LastValueBytes: 300})
	p.Publish([]byte("a"), []byte(strings.Repeat("x", 200)))
	p.Publish([]byte("b"), []byte(strings.Repeat("y", 200))) // a goes: 2 × 200 > 300
	p.Publish([]byte("c"), []byte(strings.Repeat("z", 400))) // never cached
	c := dialSub(t, p, "")
	p.Publish([]byte("end"), nil)
	got := recvTopics(t, c, 2)
	if !strings.HasPrefix(got[0], "b=") || got[1] != "end=" {
		t.Fatalf("got %.20q", got)
	}
}

// Subscribers that come and go by the thousand leave nothing behind, and
// the connection limit refuses what is beyond it.
func TestSubscribersComeAndGo(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{MaxSubscribers: 50})
	for round := range 20 {
		var conns []*Conn
		for range 50 {
			c, err := Dial(context.Background(), p.Endpoint(), DialOptions{Sub: true})
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
			_ = c.WriteMsgs([][]byte{{1}})
			conns = append(conns, c)
		}
		p.Publish([]byte("t"), []byte(fmt.Sprint(round)))
		for _, c := range conns {
			c.Close()
		}
		// A subscriber leaves the list before its subscriptions are
		// uncounted: wait for both, or fail naming what is left behind.
		testutil.Eventually(t, "the subscribers gone, nothing left behind", func() bool {
			s := p.Stats()
			return s.Subscribers == 0 && s.QueuedBytes == 0 && s.Subscriptions == 0
		})
	}
	// Past the limit a connection is closed at once.
	for range 50 {
		dialSub(t, p)
	}
	nc, err := net.Dial("tcp", strings.TrimPrefix(p.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	waitClosed(t, nc)
	if p.Stats().Refused == 0 {
		t.Fatal("refused connection not counted")
	}
}

func TestTooManySubscriptionsDisconnect(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{MaxSubscriptions: 3})
	c := dialSub(t, p, "a", "b", "c")
	_ = c.WriteMsgs([][]byte{[]byte("\x01d")})
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.ReadMsg(); err == nil {
		t.Fatal("a subscriber over the subscription limit is disconnected")
	}
	testutil.Eventually(t, "the subscriber gone", func() bool { return p.Stats().Subscribers == 0 && p.Stats().Subscriptions == 0 })
}

func BenchmarkPublishFanOut16(b *testing.B) {
	p, err := ListenPub("tcp://127.0.0.1:0", PubOptions{HWM: 1 << 30, MaxBytes: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	const subs = 16
	var wg sync.WaitGroup
	counts := make([]int, subs)
	for i := range subs {
		c, err := Dial(context.Background(), p.Endpoint(), DialOptions{Sub: true})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		_ = c.WriteMsgs([][]byte{{1}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for counts[i] < b.N {
				if _, err := c.ReadMsg(); err != nil {
					return
				}
				counts[i]++
			}
		}()
	}
	for p.Stats().Subscriptions < subs {
		time.Sleep(time.Millisecond)
	}
	msg := make([]byte, 100)
	b.ResetTimer()
	for range b.N {
		p.Publish([]byte("topic"), msg)
	}
	wg.Wait()
	b.ReportMetric(float64(b.N*subs)/b.Elapsed().Seconds(), "deliveries/s")
	if s := p.Stats(); s.Dropped > 0 {
		b.Fatalf("dropped %d", s.Dropped)
	}
}

// A subscription that comes after its subscriber ended (frames still in
// its read buffer) is refused, so the count cannot drift.
func TestSubscribeAfterEnd(t *testing.T) {
	t.Parallel()
	p := listenPub(t, PubOptions{})
	dialSub(t, p, "a")
	p.mu.Lock()
	var s *subscriber
	for x := range p.subs {
		s = x
	}
	p.mu.Unlock()
	s.end()
	if err := p.subscribe(s, []byte("b")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("subscribe after end: %v", err)
	}
	if n := p.Stats().Subscriptions; n != 0 {
		t.Fatalf("subscriptions after end: %d", n)
	}
}

// Close does not wait for a connection stuck in its handshake.
func TestPubCloseEndsHandshakes(t *testing.T) {
	t.Parallel()
	p, err := ListenPub("tcp://127.0.0.1:0", PubOptions{HandshakeTimeout: time.Hour, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.Dial("tcp", strings.TrimPrefix(p.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testutil.Eventually(t, "the handshake started", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return len(p.pending) == 1 })
	closed := make(chan struct{})
	go func() { p.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close waits for a silent connection's handshake")
	}
}
