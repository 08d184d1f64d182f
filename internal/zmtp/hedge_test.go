package zmtp

import (
	"context"
	"net"
	"testing"
	"time"
)

// paused is what a stopped broker looks like from outside: its kernel
// completes TCP connections (here accepted, to count them) and nothing
// is ever said on them.
type paused struct {
	ln    net.Listener
	conns chan net.Conn
}

func newPaused(t *testing.T) *paused {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &paused{ln: ln, conns: make(chan net.Conn, 100)}
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			p.conns <- nc
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case nc := <-p.conns:
				nc.Close()
			default:
				return
			}
		}
	})
	return p
}

func (p *paused) endpoint() string { return "tcp://" + p.ln.Addr().String() }

// connected waits for the next connection made to p.
func (p *paused) connected(t *testing.T) {
	t.Helper()
	select {
	case nc := <-p.conns:
		p.conns <- nc // kept, closed at cleanup
	case <-time.After(5 * time.Second):
		t.Fatal("no connection to the paused listener")
	}
}

// made counts the connections made to p and not yet taken: it makes
// one more itself and reads up to it (accepted in order).
func (p *paused) made(t *testing.T) int {
	t.Helper()
	mark, err := net.Dial("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer mark.Close()
	for n := 0; ; n++ {
		select {
		case nc := <-p.conns:
			nc.Close()
			if nc.RemoteAddr().String() == mark.LocalAddr().String() {
				return n
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the mark's connection was not accepted")
		}
	}
}

// freeEndpoint is an endpoint nothing listens on, yet.
func freeEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return "tcp://" + ln.Addr().String()
}

// While one endpoint has accepted the connection and says nothing (a
// paused leader), DialAny dials again the one that refused, and takes it
// once a broker listens there (its standby took over): well before the
// silent one's greeting times out.
func TestDialAnyTakesTheEndpointThatBeginsToListen(t *testing.T) {
	t.Parallel()
	silent, later := newPaused(t), freeEndpoint(t)
	type dialed struct {
		c   *Conn
		err error
	}
	got := make(chan dialed, 1)
	go func() {
		c, err := DialAny(context.Background(), silent.endpoint()+","+later, DialOptions{Identity: []byte("hedger"), Timeout: time.Minute})
		got <- dialed{c, err}
	}()
	silent.connected(t) // and later refused, at the same moment
	in := newInbox()
	r, err := Listen(later, Options{Receive: in.receive, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	select {
	case d := <-got:
		if d.err != nil {
			t.Fatal(d.err)
		}
		defer d.c.Close()
		if d.c.Endpoint() != later {
			t.Fatalf("connected to %s, want %s", d.c.Endpoint(), later)
		}
		if err := d.c.WriteMsgs(frames("here")); err != nil {
			t.Fatal(err)
		}
		in.wait(t, "hedger|here")
	case <-time.After(15 * time.Second):
		t.Fatal("DialAny still waits on the silent endpoint; the one that began to listen was not dialled again")
	}
}

// DialAny gives up when its context ends, in the handshake too: a
// single endpoint that accepts and never greets does not hold it for
// its timeout.
func TestDialAnyEndsWithItsContext(t *testing.T) {
	t.Parallel()
	silent := newPaused(t)
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan error, 1)
	go func() {
		_, err := DialAny(ctx, silent.endpoint(), DialOptions{Timeout: time.Minute})
		got <- err
	}()
	select { // the dialler's greeting read: it is in the handshake
	case nc := <-silent.conns:
		defer nc.Close()
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := nc.Read(make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no connection to the silent listener")
	}
	cancel()
	select {
	case err := <-got:
		if err == nil {
			t.Fatal("a handshake with a silent server succeeded")
		}
	case <-time.After(15 * time.Second):
		t.Fatal("DialAny went on after its context ended")
	}
}

func hedgeDial(ctx context.Context, endpoints string) (*Conn, error) {
	return DialAny(ctx, endpoints, DialOptions{Identity: []byte("hedger"), Timeout: time.Minute})
}

// A Hedge dials the endpoints other than the one connected to, and
// yields the connection a broker there greets.
func TestHedgeFindsTheBrokerThatServes(t *testing.T) {
	t.Parallel()
	current := newPaused(t)
	in := newInbox()
	r := listen(t, in, Options{})
	h := NewHedge(current.endpoint()+","+r.Endpoint(), current.endpoint(), hedgeDial)
	defer h.Stop()
	h.Try()
	select {
	case c := <-h.Won():
		defer c.Close()
		if c.Endpoint() != r.Endpoint() {
			t.Fatalf("won %s, want %s", c.Endpoint(), r.Endpoint())
		}
		if err := c.WriteMsgs(frames("switched")); err != nil {
			t.Fatal(err)
		}
		in.wait(t, "hedger|switched")
	case <-time.After(10 * time.Second):
		t.Fatal("no connection won")
	}
	if n := current.made(t); n != 0 {
		t.Fatalf("the hedge dialled the endpoint it is connected to (%d connections)", n)
	}
}

// With one endpoint there is nothing to dial; with others, one attempt
// at a time however often Try is called, and none once Stop is called.
func TestHedgeDialsOnceAtATime(t *testing.T) {
	t.Parallel()
	current, other := newPaused(t), newPaused(t)
	alone := NewHedge(current.endpoint(), current.endpoint(), hedgeDial)
	for range 100 {
		alone.Try()
	}
	alone.Stop()

	h := NewHedge(current.endpoint()+","+other.endpoint(), current.endpoint(), hedgeDial)
	for range 100 {
		h.Try()
		h.Calm()
	}
	other.connected(t) // the first attempt, waiting for a greeting that does not come
	for range 100 {
		h.Try()
	}
	h.Stop() // ends the attempt under way
	h.Try()
	if n := other.made(t); n != 1 {
		t.Fatalf("%d connections to the silent other endpoint, want the one attempt", n)
	}
	if n := current.made(t); n != 0 {
		t.Fatalf("%d connections to the endpoint connected to, want none", n)
	}
}
