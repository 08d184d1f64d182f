// Package brokertest starts real brokers and real ZeroMQ peers for tests:
// a broker on free 127.0.0.1 ports with its journal in a temp dir, and
// peers made of zmq4 DEALER sockets and the emqp codec.
package brokertest

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/broker/boltjournal"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/testutil"
	"github.com/eventmq/emq/store/boltstore"
)

// Wait is how long a test waits for something that should happen.
const Wait = testutil.Wait

// Broker is a broker running in the test process, with its admin
// listener when StartAdmin started it.
type Broker struct {
	*broker.Broker
	Admin        *admin.Server // nil: none
	Dir          string
	drainTimeout time.Duration
	cancel       context.CancelFunc
	done         chan error
	once         sync.Once
	err          error
	checked      atomic.Bool // the test has seen Run's error
}

// Start runs a broker on free ports with its journal in dir ("" = a new
// t.TempDir()); edit changes the options first. It is stopped at cleanup.
func Start(t testing.TB, dir string, edit func(*broker.Options)) *Broker {
	t.Helper()
	return start(t, dir, edit, nil)
}

// StartAdmin is Start with an admin listener on a free 127.0.0.1 port
// (AdminAddr); editAdmin, if not nil, changes its options first.
func StartAdmin(t testing.TB, dir string, edit func(*broker.Options), editAdmin func(*admin.Options)) *Broker {
	t.Helper()
	aopts := admin.DefaultOptions()
	aopts.Addr = "127.0.0.1:0"
	if editAdmin != nil {
		editAdmin(&aopts)
	}
	return start(t, dir, edit, &aopts)
}

func start(t testing.TB, dir string, edit func(*broker.Options), aopts *admin.Options) *Broker {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	opts := broker.DefaultOptions()
	opts.Frontend, opts.Backend = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	opts.PublisherIncoming, opts.PublisherOutgoing = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	opts.DataDir, opts.OpenJournal = dir, boltjournal.Open
	opts.Logger = Logger(t)
	if edit != nil {
		edit(&opts)
	}
	var srv *admin.Server
	if aopts != nil {
		aopts.Logger = opts.Logger
		aopts.MaxStreams = opts.MaxEventListeners
		var err error
		if srv, err = admin.New(*aopts); err != nil {
			t.Fatal(err)
		}
		opts.Observer = srv.Observer()
	}
	b, err := broker.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if srv != nil {
		srv.Serve(b)
		if err := srv.Start(); err != nil {
			b.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Close() })
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb := &Broker{Broker: b, Admin: srv, Dir: dir, drainTimeout: opts.DrainTimeout, cancel: cancel, done: make(chan error, 1)}
	go func() { tb.done <- b.Run(ctx) }()
	select {
	case <-b.Ready():
	case err := <-tb.done:
		t.Fatalf("broker did not start: %v", err)
	case <-time.After(Wait):
		t.Fatal("broker did not become ready")
	}
	t.Cleanup(func() {
		if err := tb.stop(); err != nil && !tb.checked.Load() {
			t.Errorf("broker stop: %v", err)
		}
	})
	return tb
}

// Stop shuts the broker down without its drain, as a second SIGTERM does
// (jobs in flight stay journaled), and returns Run's error: the test has
// seen it, so the cleanup does not report it again.
func (b *Broker) Stop() error {
	b.checked.Store(true)
	return b.stop()
}

func (b *Broker) stop() error {
	go b.Close() // wait, below, gives up after a while; Close would not
	return b.wait()
}

// AdminAddr is the admin listener's host:port ("" without StartAdmin).
func (b *Broker) AdminAddr() string {
	if b.Admin == nil {
		return ""
	}
	return b.Admin.Addr()
}

// Drain stops the broker as a first SIGTERM does: it refuses new jobs and
// waits up to DrainTimeout for the jobs in flight, then shuts down. Drain
// returns Run's error once it has.
func (b *Broker) Drain() error {
	b.checked.Store(true)
	return b.wait()
}

func (b *Broker) wait() error {
	b.once.Do(func() {
		b.cancel()
		select {
		case b.err = <-b.done:
		case <-time.After(Wait + b.drainTimeout):
			b.err = fmt.Errorf("broker did not stop within %v", Wait+b.drainTimeout)
		}
	})
	return b.err
}

// Logger writes to t.Log.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(logWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// Peer is a zmq4 DEALER speaking eMQP.
type Peer struct {
	t     testing.TB
	sock  zmq4.Socket
	in    chan emqp.Message
	Beats int // HEARTBEATs skipped by Recv
}

// Dial connects a peer with routing id id ("" = let the broker pick).
func Dial(t testing.TB, endpoint, id string) *Peer {
	t.Helper()
	var opts []zmq4.Option
	if id != "" {
		opts = append(opts, zmq4.WithID(zmq4.SocketIdentity(id)))
	}
	ctx, cancel := context.WithCancel(context.Background())
	sock := zmq4.NewDealer(ctx, opts...)
	if err := sock.Dial(endpoint); err != nil {
		cancel()
		t.Fatal(err)
	}
	p := &Peer{t: t, sock: sock, in: make(chan emqp.Message, 1024)}
	go func() {
		defer close(p.in)
		for {
			m, err := sock.Recv()
			if err != nil {
				return
			}
			msg, err := emqp.Decode(m.Frames)
			if err != nil {
				t.Errorf("peer got a message it cannot decode: %v", err)
				continue
			}
			p.in <- msg
		}
	}()
	// Closed before its context ends: zmq4's reader hands the close
	// error to the Recv above, which is still reading. The other way
	// round, a message read as the context ends is sent to nobody and
	// zmq4's goroutine waits for ever (goleak sees it).
	t.Cleanup(func() { sock.Close(); drain(sock); cancel() })
	return p
}

// drain empties a closed zmq4 socket's queue of received messages.
// zmq4 v0.17.0's per-connection reader (qreader.listen) may have read a
// message just before Close and then block for ever sending it into a
// queue of 10 that nobody reads any more, when the broker sent a burst.
// Once the socket is closed its Recv picks at random between the closed
// context and a queued message, so an empty queue is one that answered
// with an error many times in a row; each message taken frees the slot
// that reader waits for, and it then sees the closed context and ends.
func drain(sock zmq4.Socket) {
	for misses := 0; misses < 64; {
		if _, err := sock.Recv(); err != nil {
			misses++
		} else {
			misses = 0
		}
	}
}

// Send encodes and sends m.
func (p *Peer) Send(m emqp.Message) {
	p.t.Helper()
	p.SendFrames(emqp.Encode(m)...)
}

// SendFrames sends raw frames.
func (p *Peer) SendFrames(frames ...[]byte) {
	p.t.Helper()
	if err := p.TrySend(frames...); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

// TrySend sends raw frames and returns the error, for peers the broker
// may hang up on while they send.
func (p *Peer) TrySend(frames ...[]byte) error {
	return p.sock.Send(zmq4.NewMsgFrom(frames...))
}

// Recv returns the next message that is not a HEARTBEAT, or fails the test
// after Wait.
func (p *Peer) Recv() emqp.Message {
	p.t.Helper()
	m, ok := p.TryRecv(Wait)
	if !ok {
		p.t.Fatal("no message from the broker")
	}
	return m
}

// TryRecv is Recv that reports a timeout instead of failing.
func (p *Peer) TryRecv(d time.Duration) (emqp.Message, bool) {
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-p.in:
			if !ok {
				return nil, false
			}
			if _, beat := m.(*emqp.Heartbeat); beat {
				p.Beats++
				continue
			}
			return m, true
		case <-deadline:
			return nil, false
		}
	}
}

// RecvHeartbeat waits for the next HEARTBEAT, skipping nothing else.
func (p *Peer) RecvHeartbeat() *emqp.Heartbeat {
	p.t.Helper()
	select {
	case m := <-p.in:
		hb, ok := m.(*emqp.Heartbeat)
		if !ok {
			p.t.Fatalf("got %T, want a HEARTBEAT", m)
		}
		return hb
	case <-time.After(Wait):
		p.t.Fatal("no HEARTBEAT from the broker")
	}
	return nil
}

// Expect receives the next message and fails unless it is a T.
func Expect[T emqp.Message](p *Peer) T {
	p.t.Helper()
	m := p.Recv()
	v, ok := m.(T)
	if !ok {
		p.t.Fatalf("got %T %+v, want %T", m, m, v)
	}
	return v
}

// Request sends a REQUEST and waits for its ACK.
func (p *Peer) Request(queue, headers string, payload []byte) string {
	p.t.Helper()
	id := emqp.NewID()
	h, err := emqp.ParseHeaders(headers)
	if err != nil {
		p.t.Fatal(err)
	}
	p.Send(&emqp.Request{MsgID: id, Queue: queue, Headers: h, Payload: payload})
	if ack := Expect[*emqp.Ack](p); ack.AckedID != id {
		p.t.Fatalf("ACK for %s, want %s", ack.AckedID, id)
	}
	return id
}

// Inform makes p a worker for queues (CSV or JSON) and waits for the ACK.
func (p *Peer) Inform(queues string) {
	p.t.Helper()
	id := emqp.NewID()
	p.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte("INFORM"), []byte(id), []byte(queues), []byte("worker"))
	if ack := Expect[*emqp.Ack](p); ack.AckedID != id {
		p.t.Fatalf("ACK for %s, want the INFORM's %s", ack.AckedID, id)
	}
}

// Worker dials endpoint as a worker for queues (CSV or JSON) that has its
// INFORM ACKed and sends a HEARTBEAT every 50 ms until the test ends.
func Worker(t testing.TB, endpoint, id, queues string) *Peer {
	t.Helper()
	p := Dial(t, endpoint, id)
	p.Inform(queues)
	p.KeepAlive(50 * time.Millisecond)
	return p
}

// Ready offers n slots.
func (p *Peer) Ready(n int) {
	for range n {
		p.Send(&emqp.Ready{MsgID: emqp.NewID()})
	}
}

// Reply answers a job with the 6-frame REPLY.
func (p *Peer) Reply(jobID string, payload []byte) {
	p.Send(&emqp.Reply{MsgID: emqp.NewID(), Payload: payload, OrigMsgID: jobID})
}

// Eventually polls cond until it holds or Wait passes: it is
// testutil.Eventually, here for the tests that have brokertest at hand.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, what, cond)
}

// Sync returns once the broker has handled everything p sent before: it
// sends an unknown command and waits for the ERROR that answers it.
func (p *Peer) Sync() {
	p.t.Helper()
	id := emqp.NewID()
	p.SendFrames([]byte(""), []byte("eMQP/1.0"), []byte("SYNC"), []byte(id))
	if e := Expect[*emqp.Error](p); e.RefMsgID != id {
		p.t.Fatalf("ERROR for %q, want the SYNC's %s", e.RefMsgID, id)
	}
}

// KeepAlive sends a HEARTBEAT every interval until the test ends.
func (p *Peer) KeepAlive(interval time.Duration) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				_ = p.sock.Send(zmq4.NewMsgFrom(emqp.Encode(&emqp.Heartbeat{MsgID: emqp.NewID()})...))
			case <-stop:
				return
			}
		}
	}()
	p.t.Cleanup(func() { close(stop); <-done })
}

// handedOut are the ports FreeEndpoint gave in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreeEndpoint returns a tcp://127.0.0.1:PORT that nothing listens on
// now, for a broker a test starts later (a child process, or one on a
// journal another gave up). The port is outside Linux's ephemeral range
// (32768-60999): one from that range, free a moment ago, may be taken by
// any test's outgoing connection before the broker binds it. A port is
// handed out once in a test process: a test that takes several before it
// starts anything (a group's members) never gets one twice.
func FreeEndpoint(t testing.TB) string {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(12000)
		handedOut.Lock()
		taken := handedOut.ports[port]
		handedOut.ports[port] = true
		handedOut.Unlock()
		if taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken
		}
		ln.Close()
		return fmt.Sprintf("tcp://127.0.0.1:%d", port)
	}
	t.Fatal("no free port found between 20000 and 32000")
	return ""
}

// Close closes p's connection without a goodbye, as a crashed peer does.
func (p *Peer) Close() { p.sock.Close() }

// Gone reports whether the broker has closed p's connection (for example
// because a newer connection took over its routing id). It discards a
// message that is waiting.
func (p *Peer) Gone() bool {
	select {
	case _, ok := <-p.in:
		return !ok
	default:
		return false
	}
}

// Journal stops the broker (if the test has not) and opens its journal
// read-only, closed when the test ends.
func (b *Broker) Journal(t testing.TB) *boltstore.Journal {
	t.Helper()
	if err := b.stop(); err != nil && !b.checked.Load() {
		t.Fatal(err)
	}
	opts := boltstore.DefaultOptions()
	opts.ReadOnly = true
	j, err := boltstore.Open(filepath.Join(b.Dir, broker.JournalFile), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return j
}

// ChildEnv is the environment for a child process of a test (this test
// binary run again as a broker, worker or emq command): this process's,
// plus vars. It turns off the race detector's one-second sleep at a clean
// exit (GORACE atexit_sleep_ms), which every waited-for child would
// otherwise add to the run.
func ChildEnv(vars ...string) []string {
	env := append(os.Environ(), vars...)
	return append(env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
}
