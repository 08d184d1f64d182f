package zmtp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/eventmq/emq/internal/testutil"
)

func TestZ85(t *testing.T) {
	// RFC 32's test vector.
	raw := []byte{0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B}
	if got := Z85Encode(raw); got != "HelloWorld" {
		t.Fatalf("encode: %q", got)
	}
	back, err := Z85Decode("HelloWorld")
	if err != nil || string(back) != string(raw) {
		t.Fatalf("decode: %x %v", back, err)
	}
	for _, bad := range []string{"Hell", "Hello Worl", "%%%%%"} {
		if _, err := Z85Decode(bad); err == nil && bad != "%%%%%" {
			t.Errorf("%q decoded", bad)
		}
	}
	pub, sec, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	if k, err := ParseKey(pub.String()); err != nil || k != pub || PublicKey(sec) != pub {
		t.Fatalf("key round trip: %v", err)
	}
}

// secured is a router with sec and the peers it admitted.
func secured(t *testing.T, sec *ServerSecurity) (*Router, *inbox) {
	in := newInbox()
	r := listen(t, in, Options{Security: sec, HandshakeTimeout: 2 * time.Second})
	return r, in
}

func curveServer(t *testing.T, allowed ...Key) (*Router, *inbox, Key) {
	pub, secret, err := NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	r, in := secured(t, &ServerSecurity{Curve: &secret, Admit: func(a *Auth, _ string) error {
		for _, k := range allowed {
			if a.Name == k.String() {
				a.Roles = 7
				return nil
			}
		}
		return errors.New("key not allowed")
	}})
	return r, in, pub
}

func TestCurveRoundTrip(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	r, in, spub := curveServer(t, cpub)
	var auths []*Auth
	r.opts.Check = func(_ string, a *Auth, _ [][]byte) [][]byte { auths = append(auths, a); return nil }
	c, err := Dial(context.Background(), r.Endpoint(), DialOptions{Identity: []byte("cli"),
		Security: &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	big := strings.Repeat("x", 100_000)
	if err := c.WriteMsgs([][]byte{[]byte(""), []byte("hello")}, [][]byte{[]byte(big)}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "cli|/hello")
	in.wait(t, "cli|"+big)
	if len(auths) == 0 || auths[0].Mechanism != Curve || auths[0].Name != cpub.String() || auths[0].Roles != 7 {
		t.Fatalf("auth %+v", auths)
	}
	if err := r.Send("cli", [][]byte{[]byte("back"), []byte(big)}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReadMsg()
	if err != nil || string(got[0]) != "back" || string(got[1]) != big {
		t.Fatalf("read back: %v", err)
	}
}

func TestCurveRefusals(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	other, osec, _ := NewKeyPair()
	r, _, spub := curveServer(t, cpub, Key{}) // the zero key listed: still refused, as of low order
	dial := func(cs *ClientSecurity) error {
		c, err := Dial(context.Background(), r.Endpoint(), DialOptions{Security: cs, Timeout: 2 * time.Second})
		if err == nil {
			c.Close()
		}
		return err
	}
	if err := dial(&ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: other, Secret: osec}); !errors.Is(err, ErrRefused) {
		t.Errorf("an unlisted key: %v, want refused", err)
	}
	wrong, _, _ := NewKeyPair()
	if err := dial(&ClientSecurity{Mechanism: Curve, ServerKey: wrong, Public: cpub, Secret: csec}); err == nil {
		t.Error("a client with the wrong server key was admitted")
	}
	if err := dial(nil); err == nil {
		t.Error("a NULL client was admitted by a CURVE server")
	}
	if err := dial(&ClientSecurity{Mechanism: Plain, User: "a", Password: "b"}); err == nil {
		t.Error("a PLAIN client was admitted by a CURVE server")
	}
	if err := dial(&ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: Key{}, Secret: csec}); err == nil {
		t.Error("a client with a low-order key was admitted")
	}
}

func TestPlain(t *testing.T) {
	r, in := secured(t, &ServerSecurity{Plain: true, Admit: func(a *Auth, password string) error {
		if a.Name == "ann" && password == "s3cret" {
			return nil
		}
		return errors.New("wrong user or password")
	}})
	dial := func(user, password string) (*Conn, error) {
		return Dial(context.Background(), r.Endpoint(), DialOptions{Identity: []byte(user),
			Security: &ClientSecurity{Mechanism: Plain, User: user, Password: password}})
	}
	if _, err := dial("ann", "nope"); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong password: %v", err)
	}
	if _, err := dial("bob", "s3cret"); !errors.Is(err, ErrRefused) {
		t.Fatalf("wrong user: %v", err)
	}
	c, err := dial("ann", "s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMsgs([][]byte{[]byte("hi")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "ann|hi")
}

// Libzmq DEALERs (python3-zmq) with CURVE keys, and with a PLAIN user
// and password, talk to a router that offers both; a wrong password or
// an unlisted key gets nothing through.
func TestLibzmqPeers(t *testing.T) {
	python := testutil.Python(t, true)
	cpub, csec, _ := NewKeyPair()
	other, osec, _ := NewKeyPair()
	spub, ssec, _ := NewKeyPair()
	r, in := secured(t, &ServerSecurity{Curve: &ssec, Plain: true, Admit: func(a *Auth, password string) error {
		if a.Mechanism == Curve && a.Name == cpub.String() || a.Mechanism == Plain && a.Name == "ann" && password == "s3cret" {
			return nil
		}
		return errors.New("not allowed")
	}})
	script := `
import sys, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.DEALER)
s.setsockopt(zmq.IDENTITY, sys.argv[2].encode())
if sys.argv[3] == "curve":
    s.curve_serverkey, s.curve_publickey, s.curve_secretkey = [a.encode() for a in sys.argv[4:7]]
else:
    s.plain_username, s.plain_password = sys.argv[4].encode(), sys.argv[5].encode()
s.setsockopt(zmq.LINGER, 0)
s.setsockopt(zmq.RCVTIMEO, int(sys.argv[-1]))
s.connect(sys.argv[1])
s.send_multipart([b"", b"from python", b"x" * 70000])
try:
    print(s.recv_multipart()[1].decode())
except zmq.Again:
    print("no answer")
ctx.destroy(linger=0)  # before the interpreter's teardown, which may hang in it (pyzmq #1167)
`
	for _, tc := range []struct {
		id   string
		args []string
		ok   bool
	}{
		{"curve-ok", []string{"curve", spub.String(), cpub.String(), csec.String()}, true},
		{"plain-ok", []string{"plain", "ann", "s3cret"}, true},
		{"curve-unlisted", []string{"curve", spub.String(), other.String(), osec.String()}, false},
		{"plain-wrong", []string{"plain", "ann", "guess"}, false},
	} {
		timeout := "5000"
		if !tc.ok {
			timeout = "500"
		}
		args := append(append([]string{"-c", script, r.Endpoint(), tc.id}, tc.args...), timeout)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang fails, naming its case
		defer cancel()
		cmd := exec.CommandContext(ctx, python, args...)
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		if tc.ok {
			in.wait(t, tc.id+"|/from python/")
			if err := r.Send(tc.id, [][]byte{[]byte(""), []byte("from go")}); err != nil {
				t.Fatal(err)
			}
		}
		<-done
		want := "from go"
		if !tc.ok {
			want = "no answer"
		}
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("%s: %v\n%s", tc.id, err, out)
		}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	for _, m := range in.msgs {
		if strings.HasPrefix(m, "curve-unlisted|") || strings.HasPrefix(m, "plain-wrong|") {
			t.Errorf("a refused peer's message came through: %.40s", m)
		}
	}
}

// recorder keeps what is written through it.
type recorder struct {
	net.Conn
	sent bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.sent.Write(p)
	return r.Conn.Write(p)
}

// Hostile CURVE peers: a truncated HELLO, a garbage HELLO of the right
// size, a garbage INITIATE, and a whole handshake replayed byte for byte.
// Each is refused and counted; a real client keeps working beside them.
func TestCurveHostile(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	r, in, spub := curveServer(t, cpub)
	cs := &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}
	good, err := Dial(context.Background(), r.Endpoint(), DialOptions{Identity: []byte("good"), Security: cs})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()

	// A real handshake, recorded.
	nc, err := net.Dial("tcp", strings.TrimPrefix(r.Endpoint(), "tcp://"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{Conn: nc}
	c, err := secureOpen(rec, "DEALER", []byte("rec"), nil, cs, 1<<20, 2*time.Second, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.WriteMsgs([][]byte{[]byte("recorded")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "rec|recorded")
	c.Close()
	replay := rec.sent.Bytes()

	g := greeting(Curve, false)
	hello := append([]byte{flagCommand, 6 + helloLen, 5}, "HELLO"...)
	hostile := map[string][]byte{
		"truncated HELLO": append(append(g[:], hello...), make([]byte, 40)...),
		"garbage HELLO":   append(append(g[:], hello...), bytes.Repeat([]byte{0xAB}, helloLen)...),
		"replayed":        replay,
	}
	// Garbage INITIATE after a real HELLO: the recording's first part.
	helloEnd := greetingLen + 2 + 6 + helloLen
	hostile["garbage INITIATE"] = append(append([]byte{}, replay[:helloEnd]...),
		append([]byte{flagCommand | flagLong, 0, 0, 0, 0, 0, 0, 1, 9, 8}, append([]byte("INITIATE"), bytes.Repeat([]byte{1}, 256)...)...)...)
	failed := r.opts.Limit.HandshakesFailed()
	for name, b := range hostile {
		nc, err := net.Dial("tcp", strings.TrimPrefix(r.Endpoint(), "tcp://"))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = nc.Write(b)
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = io.Copy(io.Discard, nc) // the server closes it
		nc.Close()
		if err != nil {
			t.Errorf("%s: the server did not close the connection: %v", name, err)
		}
	}
	testutil.Eventually(t, "the hostile handshakes counted as failed", func() bool {
		return r.opts.Limit.HandshakesFailed() >= failed+int64(len(hostile))
	})
	if got := r.opts.Limit.HandshakesFailed() - failed; got != int64(len(hostile)) {
		t.Errorf("%d failed handshakes counted, want %d", got, len(hostile))
	}
	if err := good.WriteMsgs([][]byte{[]byte("still here")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "good|still here")
	in.mu.Lock()
	defer in.mu.Unlock()
	if n := countPrefix(in.msgs, "rec|"); n != 1 {
		t.Errorf("the recorded peer's message arrived %d times: the replay got through", n)
	}
}

func countPrefix(msgs []string, prefix string) int {
	n := 0
	for _, m := range msgs {
		if strings.HasPrefix(m, prefix) {
			n++
		}
	}
	return n
}

// A proven peer's routing id is its own: another key cannot take it
// over (the same key may: a reconnect), and nobody may announce an id
// starting with a zero byte.
func TestRoutingIDsAreTheirs(t *testing.T) {
	a, asec, _ := NewKeyPair()
	b, bsec, _ := NewKeyPair()
	r, in, spub := curveServer(t, a, b)
	dial := func(pub, sec Key, id string) (*Conn, error) {
		return Dial(context.Background(), r.Endpoint(), DialOptions{Identity: []byte(id),
			Security: &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: pub, Secret: sec}})
	}
	first, err := dial(a, asec, "worker-1")
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	if err := first.WriteMsgs([][]byte{[]byte("hello")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "worker-1|hello")
	if thief, err := dial(b, bsec, "worker-1"); err == nil {
		// Refused after its handshake: the router closes it.
		_ = thief.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := thief.ReadMsg(); err == nil {
			t.Fatal("another key took over worker-1's routing id")
		}
		thief.Close()
	}
	if err := r.Send("worker-1", [][]byte{[]byte("for worker-1")}); err != nil {
		t.Fatal(err)
	}
	if got, err := first.ReadMsg(); err != nil || string(got[0]) != "for worker-1" {
		t.Fatalf("worker-1 lost its messages: %q %v", got, err)
	}
	again, err := dial(a, asec, "worker-1") // the same key reconnecting
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if err := again.WriteMsgs([][]byte{[]byte("back")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "worker-1|back")
	if zero, err := dial(b, bsec, "\x00stolen"); err == nil {
		_ = zero.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := zero.ReadMsg(); err == nil {
			t.Fatal("a routing id starting with a zero byte was taken")
		}
		zero.Close()
	}
}

// DialAny takes the endpoint that answers; with none, the error holds
// each one's (a refusal stays a refusal).
func TestDialAny(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	r, in, spub := curveServer(t, cpub)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "tcp://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	cs := &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}
	c, err := DialAny(context.Background(), dead+", "+r.Endpoint(), DialOptions{Identity: []byte("any"), Security: cs})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WriteMsgs([][]byte{[]byte("found")}); err != nil {
		t.Fatal(err)
	}
	in.wait(t, "any|found")
	other, osec, _ := NewKeyPair()
	_, err = DialAny(context.Background(), dead+","+r.Endpoint(), DialOptions{
		Security: &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: other, Secret: osec}})
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("none answering: %v, want both errors with the refusal", err)
	}
	if _, err := DialAny(context.Background(), " , ", DialOptions{}); err == nil {
		t.Fatal("no endpoint dialled")
	}
	// Two names of one broker: one connection, which stays.
	port := r.Endpoint()[strings.LastIndex(r.Endpoint(), ":")+1:]
	for i := range 5 {
		both, err := DialAny(context.Background(), r.Endpoint()+",tcp://localhost:"+port+","+r.Endpoint(),
			DialOptions{Identity: []byte("dup"), Security: cs})
		if err != nil {
			t.Fatal(err)
		}
		hello := fmt.Sprintf("hello %d", i)
		if err := both.WriteMsgs([][]byte{[]byte(hello)}); err != nil {
			t.Fatal(err)
		}
		in.wait(t, "dup|"+hello) // the router has it
		if err := r.Send("dup", [][]byte{[]byte("still yours")}); err != nil {
			t.Fatal(err)
		}
		_ = both.SetReadDeadline(time.Now().Add(5 * time.Second))
		if got, err := both.ReadMsg(); err != nil || string(got[0]) != "still yours" {
			t.Fatalf("the connection DialAny gave: %q %v", got, err)
		}
		both.Close()
	}
}

// A large CURVE frame holds its size of the receive budget once it is
// opened: the box's share goes back.
func TestCurveFrameBudget(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	spub, ssec, _ := NewKeyPair()
	budget := NewBudget(16 << 20)
	got := make(chan int64, 1)
	r, err := Listen("tcp://127.0.0.1:0", Options{Budget: budget, Logger: testLogger(t),
		Security: &ServerSecurity{Curve: &ssec, Admit: func(*Auth, string) error { return nil }},
		Receive: func(_ string, frames [][]byte, held Held) {
			got <- held.total()
			budget.Release(held)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c, err := Dial(context.Background(), r.Endpoint(), DialOptions{Security: &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const size = 200_000
	if err := c.WriteMsgs([][]byte{make([]byte, size)}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n < size || n > size+int64(curveOverhead) {
			t.Fatalf("a %d-byte CURVE frame holds %d bytes of the budget, want its own size", size, n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received")
	}
}

// A listener whose process does not run (stopped, frozen) still gets its
// TCP connections made by the kernel, and then says nothing: DialAny
// takes the broker that speaks, every time, whichever connects first.
func TestDialAnyPassesOverASilentListener(t *testing.T) {
	cpub, csec, _ := NewKeyPair()
	r, in, spub := curveServer(t, cpub)
	silent, err := net.Listen("tcp", "127.0.0.1:0") // never accepts: the kernel's backlog only
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cs := &ClientSecurity{Mechanism: Curve, ServerKey: spub, Public: cpub, Secret: csec}
	for i := range 10 {
		c, err := DialAny(context.Background(), "tcp://"+silent.Addr().String()+","+r.Endpoint(),
			DialOptions{Identity: []byte("live"), Security: cs, Timeout: 2 * time.Second})
		if err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
		hello := fmt.Sprintf("hello %d", i)
		if err := c.WriteMsgs([][]byte{[]byte(hello)}); err != nil {
			t.Fatal(err)
		}
		in.wait(t, "live|"+hello)
		c.Close()
	}
}
