package zmtp

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Options configure a Router.
type Options struct {
	MaxFrameSize int64 // largest frame body; 0 = DefaultMaxFrameSize
	// MaxFrames is the most frames a message may have; 0 = MaxFrames.
	// Beyond MaxFrames even small frames are counted in the Budget.
	MaxFrames        int
	HandshakeTimeout time.Duration // for the ZMTP handshake; 0 = 5s
	WriteTimeout     time.Duration // a write blocked this long drops the peer; 0 = 10s
	SendQueue        int           // sends (each one message or a batch) queued per connection; 0 = 8192
	// SendQueueBytes bounds the bytes waiting for one connection's writer
	// (not counting the batch it is writing): a send beyond it drops the
	// peer as slow (a single message of any size is taken into an empty
	// queue). 0 = 64 MiB.
	SendQueueBytes int64
	// Budget bounds the bytes of received messages held by every
	// connection together (budget.go); nil = no bound but MaxFrameSize.
	Budget *Budget
	// Limit bounds the connections, with the other endpoints that share
	// it, and counts refusals and failed handshakes (limit.go); nil = a
	// limit of this endpoint's own with no bound, for the counts and the
	// logging.
	Limit  *ConnLimit
	Logger *slog.Logger // nil = slog.Default()

	// Receive is called, from the connection's reader goroutine, with
	// each message, the routing id of the connection it came on, and
	// what the message holds of the Budget, which the receiver releases
	// (Budget.Release) once it no longer needs the frames. It may block:
	// the peer then waits (TCP back-pressure), nobody else.
	Receive func(id string, frames [][]byte, held Held)
	// Undelivered is called with each message that was queued for a
	// connection that closed before writing it. May be nil.
	Undelivered func(id string, frames [][]byte)
	// Refused may return a last message for a peer whose message is
	// refused, err a *TooLargeError or a *NoRoomError (no room in the
	// Budget within minGrace); it is written before the connection is
	// closed. May be nil.
	Refused func(id string, err error) [][]byte

	// Security is the mechanism peers must use (nil = NULL: anyone).
	Security *ServerSecurity
	// Check, when set, is asked about each message before Receive, with
	// what its connection's peer proved (nil under NULL): a non-nil
	// answer is sent back instead, and the message goes no further.
	Check func(id string, auth *Auth, frames [][]byte) [][]byte
}

func (o *Options) setDefaults() {
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.SendQueue <= 0 {
		o.SendQueue = 8192
	}
	if o.SendQueueBytes <= 0 {
		o.SendQueueBytes = 64 << 20
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Limit == nil {
		o.Limit = NewConnLimit(0, 0)
	}
}

// Router is a ZMTP ROUTER endpoint: it accepts connections, knows each by
// its routing id, and sends to one id at a time.
type Router struct {
	opts Options
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.RWMutex
	conns   map[string]*routerConn
	pending map[net.Conn]struct{} // in their handshake
	keep    func(*Auth) bool      // the last Revoke's; nil = everyone proven
	closed  bool

	nextID atomic.Uint32
	queued atomic.Int64 // bytes queued for every connection
}

// Listen binds endpoint ("tcp://host:port"; port 0 picks a free one) and
// starts accepting connections.
func Listen(endpoint string, opts Options) (*Router, error) {
	if opts.Receive == nil {
		return nil, errors.New("zmtp: Options.Receive is required")
	}
	addr, err := hostPort(endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	return Serve(ln, opts)
}

// Serve accepts connections from ln (a listener shared with another
// protocol, say) until Close, which closes ln.
func Serve(ln net.Listener, opts Options) (*Router, error) {
	opts.setDefaults()
	if opts.Receive == nil {
		return nil, errors.New("zmtp: Options.Receive is required")
	}
	r := &Router{
		opts:    opts,
		ln:      ln,
		conns:   make(map[string]*routerConn),
		pending: make(map[net.Conn]struct{}),
	}
	r.nextID.Store(rand.Uint32())
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

// Revoke closes every connection whose peer proved an Auth that keep
// refuses (a key or user removed, or its roles changed), now and as
// later handshakes end (one under way when the credentials changed);
// what was queued for them is undelivered. It returns how many it
// closed now.
func (r *Router) Revoke(keep func(*Auth) bool) int {
	r.mu.Lock()
	r.keep = keep
	var gone []*routerConn
	for _, rc := range r.conns {
		if rc.Auth != nil && !keep(rc.Auth) {
			gone = append(gone, rc)
		}
	}
	r.mu.Unlock()
	for _, rc := range gone {
		rc.end(false)
	}
	return len(gone)
}

// Endpoint is the bound address as tcp://host:port.
func (r *Router) Endpoint() string { return "tcp://" + r.ln.Addr().String() }

// Send queues a message for the connection holding id. It never blocks:
// ErrNoPeer when no live connection has the id, ErrSlowPeer when the
// peer's queue is full (the connection is then closed). A queued message
// is written, or reported to Options.Undelivered.
func (r *Router) Send(id string, frames [][]byte) error {
	return r.SendBatch(id, [][][]byte{frames})
}

// SendBatch is Send for several messages, which are written together.
func (r *Router) SendBatch(id string, msgs [][][]byte) error {
	r.mu.RLock()
	rc := r.conns[id]
	r.mu.RUnlock()
	if rc == nil {
		return ErrNoPeer
	}
	return rc.send(msgs)
}

// QueuedBytes is how many bytes are queued for sending, on every
// connection together.
func (r *Router) QueuedBytes() int64 { return r.queued.Load() }

// Connected reports whether id has a live connection.
func (r *Router) Connected(id string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.conns[id] != nil
}

// Close stops accepting, writes what is queued for each connection (each
// within the write timeout), closes them and waits for every goroutine.
func (r *Router) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	err := r.ln.Close()
	for nc := range r.pending {
		nc.Close()
	}
	conns := make([]*routerConn, 0, len(r.conns))
	for _, rc := range r.conns {
		conns = append(conns, rc)
	}
	r.mu.Unlock()
	for _, rc := range conns {
		rc.end(true)
	}
	r.wg.Wait()
	return err
}

func (r *Router) accept() {
	defer r.wg.Done()
	acceptLoop(r.ln, r.opts.Logger, r.opts.Limit, func(nc net.Conn, release func()) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.closed {
			release()
			nc.Close()
			return
		}
		r.pending[nc] = struct{}{}
		r.wg.Add(1)
		go r.serve(nc, release)
	})
}

// acceptLoop hands each accepted connection that limit lets in to admit,
// with the function that gives its place back, until ln is closed; it
// closes the others at once.
func acceptLoop(ln net.Listener, log *slog.Logger, limit *ConnLimit, admit func(nc net.Conn, release func())) {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			log.Warn("zmtp: accept failed", "err", err)
			time.Sleep(10 * time.Millisecond) // e.g. out of file descriptors
			continue
		}
		release, why := limit.admit(nc.RemoteAddr())
		if why != "" {
			limit.noteRefused(log, nc, why) // counted before the peer can see the close
			nc.Close()
			continue
		}
		admit(nc, release)
	}
}

// serve runs one connection: handshake, then reads until it ends; then
// it gives its place back.
func (r *Router) serve(nc net.Conn, release func()) {
	defer r.wg.Done()
	defer release()
	c, err := openWith(nc, zmq4.Router, nil, true, r.opts.Security, nil, uint64(r.opts.MaxFrameSize), r.opts.HandshakeTimeout)
	r.mu.Lock()
	delete(r.pending, nc)
	if err == nil && r.closed {
		err = ErrClosed
	}
	if err == nil {
		err = r.mayTake(c)
	}
	if err != nil {
		r.mu.Unlock()
		if !errors.Is(err, ErrClosed) {
			r.opts.Limit.noteFailed(r.opts.Logger, nc, err) // counted before the peer can see the close
		}
		nc.Close()
		return
	}
	c.wtimeout = r.opts.WriteTimeout
	c.budget, c.maxFrames = r.opts.Budget, r.opts.MaxFrames
	id := string(c.Identity)
	if id == "" {
		// As libzmq: a generated id starts with a zero byte, which a
		// peer's own identity may not.
		var b [5]byte
		binary.BigEndian.PutUint32(b[1:], r.nextID.Add(1))
		id = string(b[:])
	}
	rc := &routerConn{
		Conn: c,
		r:    r,
		id:   id,
		out:  make(chan sending, r.opts.SendQueue),
		stop: make(chan struct{}),
		kill: make(chan struct{}),
	}
	old := r.conns[id]
	r.conns[id] = rc
	r.wg.Add(1)
	r.mu.Unlock()
	if old != nil {
		r.opts.Logger.Info("zmtp: routing id taken over by a new connection",
			"id", PrintableID(id), "old", old.RemoteAddr().String(), "new", nc.RemoteAddr().String())
		old.end(false)
	}
	go rc.writeLoop()
	rc.readLoop()
}

// mayTake reports why c may not have the routing id it announced: one
// starting with a zero byte is the Router's to generate (libzmq's rule
// too), and under PLAIN or CURVE an id held by another proven peer is
// that peer's. (Under NULL the newest connection takes an id over: a
// peer that reconnects before its old connection is seen to break.) The
// caller holds r.mu.
func (r *Router) mayTake(c *Conn) error {
	id := string(c.Identity)
	if id != "" && id[0] == 0 {
		return fmt.Errorf("zmtp: %s announced a routing id starting with a zero byte, which is the router's to give", c.RemoteAddr())
	}
	if r.keep != nil && c.Auth != nil && !r.keep(c.Auth) {
		return fmt.Errorf("zmtp: %s (%s): its credentials were revoked during its handshake", c.RemoteAddr(), c.Auth.Name)
	}
	old := r.conns[id]
	if id == "" || old == nil || old.Auth == nil {
		return nil
	}
	if c.Auth == nil || c.Auth.Name != old.Auth.Name {
		who := "an unproven peer"
		if c.Auth != nil {
			who = c.Auth.Name
		}
		return fmt.Errorf("zmtp: %s (%s) asked for routing id %s, held by %s", c.RemoteAddr(), who, PrintableID(id), old.Auth.Name)
	}
	return nil
}

// routerConn is a Router's connection with its send queue.
type routerConn struct {
	*Conn
	r  *Router
	id string

	mu      sync.Mutex // guards closed against sends into out
	closed  bool
	out     chan sending
	once    sync.Once
	stop    chan struct{} // end: write what is queued, then close
	kill    chan struct{} // end now: what is queued is undelivered
	linger  atomic.Bool   // the read loop has ended: close with lingerClose
	waiting atomic.Int64  // bytes in out: what SendQueueBytes bounds
}

// sending is one send in a connection's queue: messages and their bytes.
type sending struct {
	msgs [][][]byte
	n    int64
}

func (rc *routerConn) send(msgs [][][]byte) error {
	n := int64(0)
	for _, m := range msgs {
		n += int64(msgSize(m))
	}
	rc.mu.Lock()
	if rc.closed {
		rc.mu.Unlock()
		return ErrNoPeer
	}
	if w := rc.waiting.Load(); w == 0 || w+n <= rc.r.opts.SendQueueBytes {
		select {
		case rc.out <- sending{msgs, n}:
			rc.r.queued.Add(n)
			rc.waiting.Add(n)
			rc.mu.Unlock()
			return nil
		default:
		}
	}
	rc.mu.Unlock()
	rc.r.opts.Logger.Warn("zmtp: peer does not read; disconnecting it",
		"id", PrintableID(rc.id), "remote", rc.RemoteAddr().String(), "queued", len(rc.out), "queued_bytes", rc.waiting.Load())
	rc.end(false)
	return ErrSlowPeer
}

// end closes the connection once: gracefully (flush the queue) or at once.
func (rc *routerConn) end(graceful bool) {
	rc.once.Do(func() {
		rc.mu.Lock()
		rc.closed = true
		rc.mu.Unlock()
		rc.r.mu.Lock()
		if rc.r.conns[rc.id] == rc {
			delete(rc.r.conns, rc.id)
		}
		rc.r.mu.Unlock()
		if graceful {
			close(rc.stop)
			return
		}
		close(rc.kill)
		rc.Conn.Close()
	})
}

func (rc *routerConn) readLoop() {
	for {
		frames, held, err := rc.readMsg()
		if err != nil {
			var tl *TooLargeError
			if errors.As(err, &tl) || errors.Is(err, ErrNoRoom) || errors.Is(err, ErrTooManyFrames) {
				rc.r.opts.Logger.Warn("zmtp: message refused; disconnecting the peer",
					"id", PrintableID(rc.id), "remote", rc.RemoteAddr().String(), "err", err)
				if rc.r.opts.Refused != nil {
					if msg := rc.r.opts.Refused(rc.id, err); msg != nil {
						_ = rc.send([][][]byte{msg})
					}
				}
				rc.linger.Store(true)
				rc.end(true)
				return
			}
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				rc.r.opts.Logger.Info("zmtp: connection ended", "id", PrintableID(rc.id),
					"remote", rc.RemoteAddr().String(), "err", err)
			}
			rc.end(false)
			return
		}
		if rc.r.opts.Check != nil {
			if answer := rc.r.opts.Check(rc.id, rc.Auth, frames); answer != nil {
				rc.r.opts.Budget.Release(held)
				_ = rc.send([][][]byte{answer})
				continue
			}
		}
		rc.r.opts.Receive(rc.id, frames, held)
	}
}

func (rc *routerConn) writeLoop() {
	defer rc.r.wg.Done()
	batch := make([][][]byte, 0, 64)
	for {
		select {
		case first := <-rc.out:
			var n int64
			batch, n = rc.gather(batch[:0], first)
			err := rc.WriteMsgs(batch...)
			rc.r.queued.Add(-n)
			if err != nil {
				rc.undelivered(batch)
				rc.end(false)
				rc.drain()
				return
			}
		case <-rc.kill:
			rc.drain()
			return
		case <-rc.stop:
			for {
				var n int64
				batch, n = rc.gather(batch[:0], sending{})
				if len(batch) == 0 {
					break
				}
				err := rc.WriteMsgs(batch...)
				rc.r.queued.Add(-n)
				if err != nil {
					rc.undelivered(batch)
					rc.drain()
					break
				}
			}
			if rc.linger.Load() {
				rc.lingerClose()
			}
			rc.Conn.Close()
			return
		}
	}
}

// lingerClose ends our side with a FIN, then reads and drops what the peer
// still sends, for a while, so that the peer gets our last message: closing
// a socket with unread input sends an RST at once, which drops what we have
// not yet transmitted and can cost the peer what it has not yet read.
func (rc *routerConn) lingerClose() {
	cw, ok := rc.nc.(interface{ CloseWrite() error })
	if !ok || cw.CloseWrite() != nil {
		return
	}
	_ = rc.nc.SetReadDeadline(time.Now().Add(lingerTime))
	_, _ = io.CopyN(io.Discard, rc.Conn.r, lingerBytes)
}

// gather makes a batch of first and what else is queued, up to batchMax
// bytes, and returns it with its bytes.
func (rc *routerConn) gather(batch [][][]byte, first sending) ([][][]byte, int64) {
	next, n := first, int64(0)
	for {
		batch = append(batch, next.msgs...)
		rc.waiting.Add(-next.n)
		if n += next.n; n >= batchMax {
			return batch, n
		}
		select {
		case next = <-rc.out:
		default:
			return batch, n
		}
	}
}

// drain reports everything still queued as undelivered. The queue takes
// no more messages once the connection is closed.
func (rc *routerConn) drain() {
	for {
		select {
		case q := <-rc.out:
			rc.r.queued.Add(-q.n)
			rc.waiting.Add(-q.n)
			rc.undelivered(q.msgs)
		default:
			return
		}
	}
}

func (rc *routerConn) undelivered(batch [][][]byte) {
	if rc.r.opts.Undelivered == nil {
		return
	}
	for _, m := range batch {
		rc.r.opts.Undelivered(rc.id, m)
	}
}

// PrintableID shows a routing id: as text when it is printable ASCII, as
// 0x and hex otherwise (generated ids start with a zero byte).
func PrintableID(id string) string {
	for i := 0; i < len(id); i++ {
		if id[i] < 0x20 || id[i] > 0x7e {
			return "0x" + hex.EncodeToString([]byte(id))
		}
	}
	return id
}

// CanListen reports whether endpoint could be bound now: it is bound and
// closed again. A port that another process holds says so, naming it.
func CanListen(endpoint string) error {
	addr, err := hostPort(endpoint)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%s: port %s is held by another process (another broker on this host? give each its own ports): %w", endpoint, portOf(addr), err)
		}
		return fmt.Errorf("%s: %w", endpoint, err)
	}
	return ln.Close()
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}
