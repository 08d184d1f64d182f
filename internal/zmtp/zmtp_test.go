package zmtp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
	"github.com/go-zeromq/zmq4"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type inbox struct {
	mu     sync.Mutex
	msgs   []string // id + "|" + frames joined by "/"
	cond   chan struct{}
	budget *Budget // what the messages hold is released at once
}

func newInbox() *inbox { return &inbox{cond: make(chan struct{}, 1)} }

func (in *inbox) receive(id string, frames [][]byte, held Held) {
	in.budget.Release(held)
	in.mu.Lock()
	in.msgs = append(in.msgs, id+"|"+string(bytes.Join(frames, []byte("/"))))
	in.mu.Unlock()
	select {
	case in.cond <- struct{}{}:
	default:
	}
}

// wait returns once the inbox holds a message containing s.
func (in *inbox) wait(t *testing.T, s string) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		in.mu.Lock()
		for _, m := range in.msgs {
			if strings.Contains(m, s) {
				in.mu.Unlock()
				return
			}
		}
		in.mu.Unlock()
		select {
		case <-in.cond:
		case <-deadline:
			t.Fatalf("no message containing %q; have %q", s, in.msgs)
		}
	}
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, nil))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func listen(t *testing.T, in *inbox, opts Options) *Router {
	t.Helper()
	opts.Receive = in.receive
	opts.Logger = testLogger(t)
	r, err := Listen("tcp://127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dial(t *testing.T, r *Router, id string) *Conn {
	t.Helper()
	c, err := Dial(context.Background(), r.Endpoint(), DialOptions{Identity: []byte(id)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitConnected returns once the router has registered id: its side of the
// handshake may end after the dialer's.
func waitConnected(t *testing.T, r *Router, id string) {
	t.Helper()
	testutil.Eventually(t, id+" connected", func() bool { return r.Connected(id) })
}

func frames(s ...string) [][]byte {
	f := make([][]byte, len(s))
	for i := range s {
		f[i] = []byte(s[i])
	}
	return f
}

func recv(t *testing.T, c *Conn) string {
	t.Helper()
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, err := c.ReadMsg()
	if err != nil {
		t.Fatal(err)
	}
	return string(bytes.Join(m, []byte("/")))
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{})
	c := dial(t, r, "peer-1")
	big := strings.Repeat("x", 100_000)
	if err := c.WriteMsgs(frames("", "hello", big), frames("", "second")); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "peer-1|/hello/"+big)
	in.wait(t, "peer-1|/second")
	if err := r.Send("peer-1", frames("", "back", big)); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, c); got != "/back/"+big {
		t.Fatalf("got %d bytes", len(got))
	}
	if err := r.Send("nobody", frames("x")); !errors.Is(err, ErrNoPeer) {
		t.Fatalf("send to an unknown id: %v, want ErrNoPeer", err)
	}
}

// A zmq4 DEALER and a generated routing id.
func TestZmq4Dealer(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{})
	d := zmq4.NewDealer(context.Background())
	defer d.Close()
	if err := d.Dial(r.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := d.Send(zmq4.NewMsgFrom([]byte(""), []byte("hi"))); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "|/hi")
	in.mu.Lock()
	id := strings.SplitN(in.msgs[0], "|", 2)[0]
	in.mu.Unlock()
	if err := r.Send(id, frames("", "ho")); err != nil {
		t.Fatal(err)
	}
	m, err := d.Recv()
	if err != nil || string(m.Frames[1]) != "ho" {
		t.Fatalf("dealer got %q, %v", m.Frames, err)
	}
}

// greeting is a ZMTP 3.0 NULL greeting, then a READY for a DEALER with id.
func rawHandshake(id string) []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	var props []byte
	prop := func(k, v string) {
		props = append(props, byte(len(k)))
		props = append(props, k...)
		props = binary.BigEndian.AppendUint32(props, uint32(len(v)))
		props = append(props, v...)
	}
	prop("Socket-Type", "DEALER")
	prop("Identity", id)
	body := append([]byte{5}, "READY"...)
	body = append(body, props...)
	return append(append(g, flagCommand, byte(len(body))), body...)
}

func rawConn(t *testing.T, r *Router) net.Conn {
	t.Helper()
	nc, err := net.Dial("tcp", strings.TrimPrefix(r.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return nc
}

// waitClosed reads until the router closes nc.
func waitClosed(t *testing.T, nc net.Conn) {
	t.Helper()
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.Copy(io.Discard, nc); err != nil {
		t.Fatalf("connection was not closed by the router: %v", err)
	}
}

func TestHugeFrameHeader(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{MaxFrameSize: 1 << 20})
	for _, during := range []bool{false, true} {
		nc := rawConn(t, r)
		msg := rawHandshake("huge")
		if during { // the header replaces the READY command
			msg = msg[:64]
		}
		hdr := binary.BigEndian.AppendUint64([]byte{flagLong}, 1<<50)
		if _, err := nc.Write(append(msg, hdr...)); err != nil {
			t.Fatal(err)
		}
		waitClosed(t, nc)
	}
	c := dial(t, r, "after")
	if err := c.WriteMsgs(frames("still", "serving")); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "after|still/serving")
}

func TestMalformedMetadata(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{})
	nc := rawConn(t, r)
	g := rawHandshake("x")[:64]
	body := append([]byte{5}, "READY"...)
	body = append(body, 5, 'a', 'b', 'c', 'd', 'e') // property cut after its name
	if _, err := nc.Write(append(append(g, flagCommand, byte(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, nc)
	c := dial(t, r, "after")
	if err := c.WriteMsgs(frames("ok")); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "after|ok")
}

func TestSilentPeerDelaysNobody(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{HandshakeTimeout: time.Hour})
	rawConn(t, r) // connects and says nothing
	c := dial(t, r, "talker")
	if err := c.WriteMsgs(frames("hi")); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "talker|hi")
}

func TestNonReaderIsDropped(t *testing.T) {
	t.Parallel()
	in := newInbox()
	var undelivered sync.WaitGroup
	undelivered.Add(1)
	var once sync.Once
	r := listen(t, in, Options{SendQueue: 4, Undelivered: func(string, [][]byte) { once.Do(undelivered.Done) }})
	nc := rawConn(t, r)
	if _, err := nc.Write(rawHandshake("sleeper")); err != nil {
		t.Fatal(err)
	}
	nc.Write([]byte{0, 2, 'h', 'i'})
	in.wait(t, "sleeper|hi")
	reader := dial(t, r, "reader")
	waitConnected(t, r, "reader")
	big := frames(strings.Repeat("x", 1<<20))
	var err error
	for i := 0; i < 1000 && err == nil; i++ {
		err = r.Send("sleeper", big)
		if e := r.Send("reader", frames("ping")); e != nil {
			t.Fatal(e)
		}
		if got := recv(t, reader); got != "ping" {
			t.Fatal(got)
		}
	}
	if !errors.Is(err, ErrSlowPeer) {
		t.Fatalf("sends to a non-reader: %v, want ErrSlowPeer", err)
	}
	undelivered.Wait()
}

func TestNewestConnectionTakesOver(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{})
	first := dial(t, r, "same")
	first.WriteMsgs(frames("one"))
	in.wait(t, "same|one")
	second := dial(t, r, "same")
	second.WriteMsgs(frames("two"))
	in.wait(t, "same|two")
	if err := r.Send("same", frames("for-the-newest")); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, second); got != "for-the-newest" {
		t.Fatal(got)
	}
	_ = first.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if m, err := first.ReadMsg(); err == nil {
		t.Fatalf("the replaced connection got %q", m)
	}
}

func TestPingPong(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{})
	nc := rawConn(t, r)
	if _, err := nc.Write(rawHandshake("pinger")); err != nil {
		t.Fatal(err)
	}
	ping := append([]byte{4}, "PING"...)
	ping = append(ping, 0, 10, 'c', 't', 'x')
	nc.Write(append([]byte{flagCommand, byte(len(ping))}, ping...))
	// Skip the router's greeting and READY, then expect PONG "ctx".
	_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64+2)
	if _, err := io.ReadFull(nc, buf); err != nil {
		t.Fatal(err)
	}
	ready := make([]byte, buf[65])
	io.ReadFull(nc, ready)
	pong := make([]byte, 2+1+4+3)
	if _, err := io.ReadFull(nc, pong); err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{flagCommand, 8, 4}, "PONGctx"...); !bytes.Equal(pong, want) {
		t.Fatalf("got %q, want %q", pong, want)
	}
}

// A peer told its frame is too large gets the last message and then a clean
// end of stream, even while it is still sending: no reset that could
// destroy the message on a slower network.
func TestLastWordsBeforeHangUp(t *testing.T) {
	t.Parallel()
	in := newInbox()
	r := listen(t, in, Options{
		MaxFrameSize: 1024,
		Refused:      func(string, error) [][]byte { return frames("too", "large") },
	})
	c := dial(t, r, "big")
	waitConnected(t, r, "big")
	sent := make(chan error, 1)
	go func() {
		hdr := binary.BigEndian.AppendUint64([]byte{flagLong}, 64<<20)
		_, err := c.nc.Write(hdr)
		chunk := make([]byte, 64<<10)
		for n := 0; err == nil && n < 1024; n++ {
			_, err = c.nc.Write(chunk)
		}
		sent <- err
	}()
	if got := recv(t, c); got != "too/large" {
		t.Fatalf("got %q", got)
	}
	_ = c.nc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.ReadMsg(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last message: %v, want a clean EOF", err)
	}
	c.Close()
	<-sent
}
