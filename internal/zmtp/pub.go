package zmtp

import (
	"bytes"
	"container/list"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
)

// PubOptions configure a Pub. Every bound is on what peers send or what
// the publisher queues for them; none grows without one.
type PubOptions struct {
	// Security is the mechanism subscribers must use (nil = NULL).
	Security *ServerSecurity
	// HWM is how many messages may wait for one subscriber, besides the
	// batch its writer holds (at most as many); beyond it the
	// subscriber's messages are dropped (counted), as libzmq's SNDHWM
	// does. 0 = 1000.
	HWM int
	// MaxBytes bounds the bytes waiting for every subscriber together (a
	// message waiting for three subscribers counts three times); one
	// subscriber may hold a quarter of it. 0 = 64 MiB.
	MaxBytes int64
	// MaxSubscribers bounds the connections, handshakes included; more
	// are closed at once. 0 = 10,000.
	MaxSubscribers int
	// MaxSubscriptions bounds one subscriber's prefixes; a subscriber
	// that sends more is disconnected. 0 = 1,000.
	MaxSubscriptions int
	// MaxSubscriptionBytes bounds the bytes of every subscriber's prefixes
	// together; a subscription past it disconnects its subscriber.
	// 0 = 16 MiB.
	MaxSubscriptionBytes int64
	// LastValue keeps each topic's latest message and sends it first to
	// a new subscription that matches the topic, within LastValueTopics
	// topics (0 = 10,000) and LastValueBytes bytes (0 = 16 MiB); the
	// least recently published topics are forgotten first.
	LastValue       bool
	LastValueTopics int
	LastValueBytes  int64

	HandshakeTimeout time.Duration // 0 = 5s
	// WriteTimeout: a subscriber whose write is blocked this long (it
	// stopped reading) is disconnected. 0 = 10s.
	WriteTimeout time.Duration
	Logger       *slog.Logger // nil = slog.Default()
	// Limit bounds the connections with the endpoints that share it,
	// before MaxSubscribers (limit.go); nil = only MaxSubscribers.
	Limit *ConnLimit
}

func (o *PubOptions) setDefaults() {
	if o.HWM <= 0 {
		o.HWM = 1000
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = 64 << 20
	}
	if o.MaxSubscribers <= 0 {
		o.MaxSubscribers = 10000
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = 1000
	}
	if o.MaxSubscriptionBytes <= 0 {
		o.MaxSubscriptionBytes = 16 << 20
	}
	if o.LastValueTopics <= 0 {
		o.LastValueTopics = 10000
	}
	if o.LastValueBytes <= 0 {
		o.LastValueBytes = 16 << 20
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 5 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Limits of a subscriber's connection: a subscription frame is a flag
// byte (or a ZMTP 3.1 command name) and a prefix; reads and writes keep
// small buffers, so that ten thousand idle subscribers cost little.
const (
	// MaxPrefix: a longer prefix matches no topic (emqp.MaxTopicLen), so
	// it is not kept.
	MaxPrefix    = 1024
	subMaxFrame  = 16 + 4096
	subReadBuf   = 4 << 10
	subWriteKeep = 64 << 10 // bytes of a write buffer kept between writes
	subBatch     = 64 << 10 // bytes of small messages written at once
)

// Pub is a ZMTP PUB endpoint: ZeroMQ SUB (and XSUB) sockets connect to it
// and subscribe by topic prefix, with ZMTP 3.0 subscription messages
// (0x01 prefix; 0x00 prefix cancels) or ZMTP 3.1 SUBSCRIBE and CANCEL
// commands. As in libzmq's PUB, a connection's prefixes are a set: the
// same prefix twice is one subscription, one cancel removes it (a libzmq
// SUB counts its duplicates itself and cancels with the last). Unlike
// libzmq, only single-frame messages subscribe. Publish never blocks:
// each subscriber has its own queue and writer, and a subscriber whose
// queue is full misses messages (counted) while the others keep
// receiving.
type Pub struct {
	opts PubOptions
	ln   net.Listener
	wg   sync.WaitGroup

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	keep    func(*Auth) bool      // the last Revoke's; nil = everyone proven
	pending map[net.Conn]struct{} // in their handshake
	own     *ConnLimit            // MaxSubscribers, handshakes included
	closed  bool
	list    atomic.Pointer[[]*subscriber] // what Publish walks: subs, copied on change

	lvMu sync.Mutex // orders Publish and new subscriptions with a last-value cache
	lv   *lastValues

	queued    atomic.Int64 // bytes waiting, every subscriber together
	prefixes  atomic.Int64 // subscriptions, every subscriber together
	prefixLen atomic.Int64 // their bytes
	published atomic.Uint64
	delivered atomic.Uint64
	dropped   atomic.Uint64
}

// PubStats are a Pub's counters.
type PubStats struct {
	Published     uint64 // Publish calls
	Delivered     uint64 // messages written to subscribers
	Dropped       uint64 // messages a subscriber missed: its queue was full, or it went away first
	Refused       uint64 // connections closed at once: MaxSubscribers reached
	Subscribers   int
	Subscriptions int64 // prefixes, every subscriber together
	QueuedBytes   int64
	LastValues    int // topics in the last-value cache
}

// ListenPub binds endpoint ("tcp://host:port") and accepts subscribers.
func ListenPub(endpoint string, opts PubOptions) (*Pub, error) {
	opts.setDefaults()
	addr, err := hostPort(endpoint)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &Pub{opts: opts, ln: ln, subs: make(map[*subscriber]struct{}), pending: make(map[net.Conn]struct{}),
		own: NewConnLimit(opts.MaxSubscribers, 0)}
	p.list.Store(&[]*subscriber{})
	if opts.LastValue {
		p.lv = newLastValues(opts.LastValueTopics, opts.LastValueBytes)
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Endpoint is the bound address as tcp://host:port.
func (p *Pub) Endpoint() string { return "tcp://" + p.ln.Addr().String() }

// Stats returns the counters.
func (p *Pub) Stats() PubStats {
	s := PubStats{
		Published:     p.published.Load(),
		Delivered:     p.delivered.Load(),
		Dropped:       p.dropped.Load(),
		Refused:       uint64(p.own.Refused()),
		Subscribers:   len(*p.list.Load()),
		Subscriptions: p.prefixes.Load(),
		QueuedBytes:   p.queued.Load(),
	}
	if p.lv != nil {
		p.lvMu.Lock()
		s.LastValues = p.lv.len()
		p.lvMu.Unlock()
	}
	return s
}

// Publish queues [topic, msg] for every subscriber with a matching prefix.
// It keeps neither slice: small ones are copied, large ones are kept as
// they are (the caller must not change them).
func (p *Pub) Publish(topic, msg []byte) {
	p.published.Add(1)
	m := newPubMsg(topic, msg)
	if p.lv != nil {
		p.lvMu.Lock()
		defer p.lvMu.Unlock()
		p.lv.put(m)
	}
	for _, s := range *p.list.Load() {
		s.offer(m)
	}
}

// Close stops accepting and disconnects every subscriber; what is queued
// for them is dropped.
func (p *Pub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	err := p.ln.Close()
	for nc := range p.pending {
		nc.Close()
	}
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		s.end()
	}
	p.wg.Wait()
	return err
}

func (p *Pub) accept() {
	defer p.wg.Done()
	acceptLoop(p.ln, p.opts.Logger, p.opts.Limit, func(nc net.Conn, shared func()) {
		own, why := p.own.admit(nc.RemoteAddr())
		if why != "" {
			shared()
			p.own.noteRefused(p.opts.Logger, nc, "max-subscribers") // counted before the peer can see the close
			nc.Close()
			return
		}
		release := func() { own(); shared() }
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			release()
			nc.Close()
			return
		}
		p.pending[nc] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(nc, release)
	})
}

func (p *Pub) serve(nc net.Conn, release func()) {
	defer p.wg.Done()
	var c *Conn
	var err error
	if p.opts.Security != nil {
		c, err = secureOpen(nc, string(zmq4.Pub), nil, p.opts.Security, nil, subMaxFrame, p.opts.HandshakeTimeout, subReadBuf)
	} else {
		c, err = openBuffered(nc, zmq4.Pub, nil, true, subMaxFrame, p.opts.HandshakeTimeout, subReadBuf)
	}
	p.mu.Lock()
	delete(p.pending, nc)
	if err == nil && p.keep != nil && c.Auth != nil && !p.keep(c.Auth) {
		err = fmt.Errorf("zmtp: %s (%s): its credentials were revoked during its handshake", nc.RemoteAddr(), c.Auth.Name)
	}
	p.mu.Unlock()
	if err != nil {
		p.opts.Limit.noteFailed(p.opts.Logger, nc, err) // counted before the peer can see the close
		nc.Close()
		release()
		return
	}
	c.wtimeout = p.opts.WriteTimeout
	c.keep = subWriteKeep
	s := &subscriber{Conn: c, p: p, release: release, wake: make(chan struct{}, 1), done: make(chan struct{})}
	c.onCommand = s.command
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		release()
		return
	}
	p.subs[s] = struct{}{}
	p.relist()
	p.wg.Add(1)
	p.mu.Unlock()
	go s.writeLoop()
	s.readLoop()
}

// relist copies the subscribers for Publish; p.mu is held.
func (p *Pub) relist() {
	l := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		l = append(l, s)
	}
	p.list.Store(&l)
}

// subscribe adds a prefix to s; with a last-value cache, s then gets the
// latest message of each cached topic the prefix matches, before any
// message published after.
func (p *Pub) subscribe(s *subscriber, prefix []byte) error {
	if p.lv != nil {
		p.lvMu.Lock()
		defer p.lvMu.Unlock()
	}
	if len(prefix) > MaxPrefix {
		return nil // matches no topic
	}
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return net.ErrClosed
	case slices.ContainsFunc(s.prefixes, func(x []byte) bool { return bytes.Equal(x, prefix) }):
		s.mu.Unlock()
		return nil // a set, as in libzmq
	case len(s.prefixes) >= p.opts.MaxSubscriptions:
		s.mu.Unlock()
		return errTooManySubscriptions
	case p.prefixLen.Add(int64(len(prefix))) > p.opts.MaxSubscriptionBytes:
		p.prefixLen.Add(-int64(len(prefix)))
		s.mu.Unlock()
		return errSubscriptionBytes
	}
	s.prefixes = append(s.prefixes, bytes.Clone(prefix))
	p.prefixes.Add(1)
	s.mu.Unlock()
	if p.lv != nil {
		p.lv.each(prefix, s.offer)
	}
	return nil
}

var (
	errTooManySubscriptions = errors.New("zmtp: subscriber sent more subscriptions than the limit")
	errSubscriptionBytes    = errors.New("zmtp: every subscriber's prefixes together are at their limit in bytes")
)

// pubMsg is one published message, shared by the queues that hold it.
type pubMsg struct {
	frames [2][]byte // topic, message
	n      int64     // bytes on the wire
}

// newPubMsg copies the small frames, which may be carved from a
// connection's shared arena, into one buffer: a queued message keeps
// alive only what it holds.
func newPubMsg(topic, msg []byte) *pubMsg {
	small := 0
	for _, f := range [2][]byte{topic, msg} {
		if len(f) <= ArenaMax {
			small += len(f)
		}
	}
	buf := make([]byte, 0, small)
	if len(topic) <= ArenaMax {
		buf = append(buf, topic...)
		topic = buf[:len(topic):len(topic)]
	}
	if len(msg) <= ArenaMax {
		i := len(buf)
		buf = append(buf, msg...)
		msg = buf[i:len(buf):len(buf)]
	}
	m := &pubMsg{frames: [2][]byte{topic, msg}}
	m.n = int64(msgSize(m.frames[:]))
	return m
}

// subscriber is one SUB connection with its prefixes and queue.
type subscriber struct {
	*Conn
	p       *Pub
	release func() // its place in the ConnLimit

	mu       sync.Mutex
	prefixes [][]byte // a set
	queue    []*pubMsg
	spare    []*pubMsg // the writer's last batch, reused
	bytes    int64     // of queue
	writing  int64     // of the batch the writer holds
	parked   bool      // the writer waits for wake
	closed   bool

	wake chan struct{}
	done chan struct{}
	once sync.Once
}

func (s *subscriber) matches(topic []byte) bool {
	for _, p := range s.prefixes {
		if bytes.HasPrefix(topic, p) {
			return true
		}
	}
	return false
}

// offer queues m if s subscribed to its topic and has room.
func (s *subscriber) offer(m *pubMsg) {
	s.mu.Lock()
	if s.closed || !s.matches(m.frames[0]) {
		s.mu.Unlock()
		return
	}
	p := s.p
	if len(s.queue) >= p.opts.HWM || s.bytes+s.writing+m.n > p.opts.MaxBytes/4 {
		s.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	if p.queued.Add(m.n) > p.opts.MaxBytes {
		p.queued.Add(-m.n)
		s.mu.Unlock()
		p.dropped.Add(1)
		return
	}
	s.queue = append(s.queue, m)
	s.bytes += m.n
	wake := s.parked
	s.parked = false
	s.mu.Unlock()
	if wake {
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// take waits for queued messages and returns them all.
func (s *subscriber) take() ([]*pubMsg, int64, bool) {
	s.mu.Lock()
	for len(s.queue) == 0 {
		if s.closed {
			s.mu.Unlock()
			return nil, 0, false
		}
		s.parked = true
		s.mu.Unlock()
		select {
		case <-s.wake:
		case <-s.done:
		}
		s.mu.Lock()
	}
	batch, n := s.queue, s.bytes
	s.queue, s.spare, s.bytes, s.writing = s.spare[:0], nil, 0, n
	s.mu.Unlock()
	return batch, n, true
}

func (s *subscriber) writeLoop() {
	defer s.p.wg.Done()
	var msgs [][][]byte
	for {
		batch, n, ok := s.take()
		if !ok {
			return
		}
		var err error
		for i := 0; i < len(batch) && err == nil; {
			msgs = msgs[:0]
			size := int64(0)
			for ; i < len(batch) && (len(msgs) == 0 || size < subBatch); i++ {
				msgs = append(msgs, batch[i].frames[:])
				size += batch[i].n
			}
			if err = s.WriteMsgs(msgs...); err == nil {
				s.p.delivered.Add(uint64(len(msgs)))
			} else {
				s.p.dropped.Add(uint64(len(batch) - i + len(msgs)))
			}
		}
		s.p.queued.Add(-n)
		clear(batch)
		clear(msgs)
		s.mu.Lock()
		s.spare, s.writing = batch[:0], 0
		s.mu.Unlock()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.p.opts.Logger.Info("zmtp: subscriber dropped: a write failed or was blocked for the write timeout",
					"remote", s.RemoteAddr().String(), "err", err)
			}
			s.end()
			return
		}
	}
}

func (s *subscriber) readLoop() {
	defer s.end()
	for {
		frames, err := s.ReadMsg()
		if err == nil && len(frames) == 1 && len(frames[0]) > 0 {
			switch frames[0][0] {
			case 1:
				err = s.p.subscribe(s, frames[0][1:])
			case 0:
				s.cancel(frames[0][1:])
			}
		} // other messages mean nothing to a PUB socket, as in libzmq
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.p.opts.Logger.Info("zmtp: subscriber disconnected", "remote", s.RemoteAddr().String(), "err", err)
			}
			return
		}
	}
}

// command takes ZMTP 3.1's SUBSCRIBE and CANCEL.
func (s *subscriber) command(name string, data []byte) error {
	switch name {
	case "SUBSCRIBE":
		return s.p.subscribe(s, data)
	case "CANCEL":
		s.cancel(data)
	}
	return nil
}

// cancel removes the subscription to prefix, if there is one.
func (s *subscriber) cancel(prefix []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, p := range s.prefixes {
		if bytes.Equal(p, prefix) {
			s.prefixes = append(s.prefixes[:i], s.prefixes[i+1:]...)
			s.p.prefixes.Add(-1)
			s.p.prefixLen.Add(-int64(len(p)))
			return
		}
	}
}

// end closes the connection once; what was queued is dropped.
func (s *subscriber) end() {
	s.once.Do(func() {
		p := s.p
		p.mu.Lock()
		delete(p.subs, s)
		p.relist()
		p.mu.Unlock()
		s.release()
		s.mu.Lock()
		s.closed = true
		n, lost := s.bytes, len(s.queue)
		clear(s.queue)
		s.queue, s.bytes = nil, 0
		p.prefixes.Add(-int64(len(s.prefixes)))
		for _, x := range s.prefixes {
			p.prefixLen.Add(-int64(len(x)))
		}
		s.prefixes = nil
		s.mu.Unlock()
		p.queued.Add(-n)
		p.dropped.Add(uint64(lost))
		close(s.done)
		s.Close()
	})
}

// lastValues is the last-value cache: each topic's latest message, the
// least recently published topics forgotten first past its bounds.
type lastValues struct {
	maxTopics int
	maxBytes  int64
	bytes     int64
	byTopic   map[string]*list.Element // of *pubMsg
	order     *list.List               // front: most recently published
}

func newLastValues(topics int, bytes int64) *lastValues {
	return &lastValues{maxTopics: topics, maxBytes: bytes, byTopic: make(map[string]*list.Element), order: list.New()}
}

func (l *lastValues) len() int { return len(l.byTopic) }

func (l *lastValues) put(m *pubMsg) {
	if e, ok := l.byTopic[string(m.frames[0])]; ok {
		l.remove(e)
	}
	if m.n > l.maxBytes {
		return // would push out everything else; its topic keeps no stale value either
	}
	l.byTopic[string(m.frames[0])] = l.order.PushFront(m)
	l.bytes += m.n
	for len(l.byTopic) > l.maxTopics || l.bytes > l.maxBytes {
		l.remove(l.order.Back())
	}
}

func (l *lastValues) remove(e *list.Element) {
	m := l.order.Remove(e).(*pubMsg)
	delete(l.byTopic, string(m.frames[0]))
	l.bytes -= m.n
}

// each calls fn with every cached message whose topic starts with prefix,
// oldest first.
func (l *lastValues) each(prefix []byte, fn func(*pubMsg)) {
	for e := l.order.Back(); e != nil; e = e.Prev() {
		if m := e.Value.(*pubMsg); bytes.HasPrefix(m.frames[0], prefix) {
			fn(m)
		}
	}
}

// Revoke closes every subscriber whose proven Auth keep refuses, now and
// as later handshakes end (one that was under way when the credentials
// changed), and returns how many it closed now.
func (p *Pub) Revoke(keep func(*Auth) bool) int {
	p.mu.Lock()
	p.keep = keep
	var gone []*subscriber
	for s := range p.subs {
		if s.Auth != nil && !keep(s.Auth) {
			gone = append(gone, s)
		}
	}
	p.mu.Unlock()
	for _, s := range gone {
		s.end()
	}
	return len(gone)
}
