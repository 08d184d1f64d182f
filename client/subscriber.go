package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/internal/redial"
	"github.com/eventmq/emq/internal/zmtp"
)

// SubscriberOptions configure a Subscriber.
type SubscriberOptions struct {
	Endpoint    string        // the broker's publisher-outgoing, tcp://host:port; several, comma-separated: the one that answers
	DialTimeout time.Duration // for one connection attempt; 0 = 5s
	// Buffer is how many received messages wait for Recv; while it is
	// full the subscriber stops reading, and the broker drops what goes
	// past its subscriber-hwm. 0 = 1024.
	Buffer int
	// A ZMTP PING every HeartbeatInterval (0 = 1s). A broker that answers
	// nothing and sends nothing for 1.5 HeartbeatIntervals has the other
	// endpoints dialled beside it, and one that greets there is switched
	// to (a paused leader's standby that took over); silent for
	// HeartbeatTimeout (0 = 3s), it is left and every endpoint dialled
	// again.
	HeartbeatInterval time.Duration
	HeartbeatTimeout  time.Duration
	Logger            *slog.Logger // nil = slog.Default()
	// Security is CURVE keys or a PLAIN user with the subscriber role,
	// for a broker that wants them; the zero value = NULL.
	Security Security
}

// Message is a published message as a subscriber receives it.
type Message struct {
	Topic   string
	Payload []byte
}

// Subscriber receives what is published to the topic prefixes it
// subscribes to (the empty prefix: everything). It is a ZeroMQ SUB socket:
// it reconnects after a broken connection and subscribes again. Pub/sub is
// not durable: what is published while it is not connected, or past its
// queue at the broker, it does not get.
type Subscriber struct {
	opts SubscriberOptions
	sec  *zmtp.ClientSecurity
	log  *slog.Logger
	in   chan Message

	mu       sync.Mutex
	prefixes []string // as subscribed, duplicates too
	conn     *zmtp.Conn
	closed   bool
	done     chan struct{}
	cancel   context.CancelFunc // ends a dial in progress
	wg       sync.WaitGroup
}

// Subscribe connects a Subscriber to endpoint, subscribed to prefixes.
// It connects in the background; Recv waits for messages.
func Subscribe(opts SubscriberOptions, prefixes ...string) (*Subscriber, error) {
	if opts.Endpoint == "" {
		return nil, errors.New("client: SubscriberOptions.Endpoint is required (tcp://host:port)")
	}
	for _, p := range prefixes {
		if err := checkPrefix(p); err != nil {
			return nil, err
		}
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.Buffer <= 0 {
		opts.Buffer = 1024
	}
	if err := heartbeats(&opts.HeartbeatInterval, &opts.HeartbeatTimeout); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sec, err := opts.Security.Dial()
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Subscriber{opts: opts, sec: sec, log: opts.Logger, in: make(chan Message, opts.Buffer),
		prefixes: append([]string(nil), prefixes...), done: make(chan struct{}), cancel: cancel}
	s.wg.Add(1)
	go s.run(ctx)
	return s, nil
}

func checkPrefix(p string) error {
	if len(p) > emqp.MaxTopicLen {
		return errors.New("client: a prefix longer than the longest topic matches nothing")
	}
	return nil
}

// Recv returns the next message.
func (s *Subscriber) Recv(ctx context.Context) (Message, error) {
	select {
	case m := <-s.in:
		return m, nil
	case <-ctx.Done():
		return Message{}, ctx.Err()
	case <-s.done:
		return Message{}, ErrClosed
	}
}

// Add subscribes to one more prefix. Adding one twice needs two Removes,
// as with a ZeroMQ SUB socket.
func (s *Subscriber) Add(prefix string) error {
	if err := checkPrefix(prefix); err != nil {
		return err
	}
	return s.change(prefix, true)
}

// Remove cancels one subscription to prefix; from its return, no message
// that only it matched is received.
func (s *Subscriber) Remove(prefix string) error { return s.change(prefix, false) }

// change keeps the prefixes with their counts, and tells the broker,
// whose subscriptions are a set, of the first Add and the last Remove.
func (s *Subscriber) change(prefix string, add bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	had := slices.Contains(s.prefixes, prefix)
	if add {
		s.prefixes = append(s.prefixes, prefix)
	} else if i := slices.Index(s.prefixes, prefix); i >= 0 {
		s.prefixes = slices.Delete(s.prefixes, i, i+1)
	}
	flag, tell := byte(1), add && !had
	if !add {
		flag, tell = 0, had && !slices.Contains(s.prefixes, prefix)
	}
	if tell && s.conn != nil { // else sent on connecting
		_ = s.conn.WriteMsgs([][]byte{append([]byte{flag}, prefix...)})
	}
	return nil
}

// wants reports whether topic matches a prefix; s.mu is held.
func (s *Subscriber) wants(topic []byte) bool {
	for _, p := range s.prefixes {
		if bytes.HasPrefix(topic, []byte(p)) {
			return true
		}
	}
	return false
}

// Close disconnects.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	s.cancel()
	if s.conn != nil {
		s.conn.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// run keeps a connection and reads from it.
func (s *Subscriber) run(ctx context.Context) {
	defer s.wg.Done()
	backoff := redial.New(2 * time.Second)
	var next *zmtp.Conn // a broker the hedge found serving on another endpoint
	for {
		conn, err := next, error(nil)
		if conn == nil {
			conn, err = s.dial(ctx, s.opts.Endpoint)
		}
		next = nil
		if err == nil {
			s.mu.Lock()
			if s.closed {
				s.mu.Unlock()
				conn.Close()
				return
			}
			var subs [][][]byte
			for i, p := range s.prefixes {
				if !slices.Contains(s.prefixes[:i], p) {
					subs = append(subs, [][]byte{append([]byte{1}, p...)})
				}
			}
			if len(subs) > 0 {
				err = conn.WriteMsgs(subs...)
			}
			s.conn = conn
			s.mu.Unlock()
			if err == nil {
				began := time.Now()
				var heard atomic.Int64 // the last message read, or -1 while one waits for Recv
				heard.Store(began.UnixNano())
				stop := s.watch(conn, &heard)
				err = s.read(conn, &heard)
				next = stop()
				if time.Since(began) > 5*time.Second { // it was not refused at once
					backoff.Reset()
				}
			}
			conn.Close()
			s.mu.Lock()
			s.conn = nil
			s.mu.Unlock()
		}
		if next != nil {
			continue
		}
		in := backoff.Next()
		s.log.Info("client: subscriber connection lost; reconnecting", "endpoint", s.opts.Endpoint, "err", err, "in", in)
		if !redial.Wait(in, s.done) {
			return
		}
	}
}

// dial connects a SUB to the first of endpoints that greets.
func (s *Subscriber) dial(ctx context.Context, endpoints string) (*zmtp.Conn, error) {
	return zmtp.DialAny(ctx, endpoints, zmtp.DialOptions{
		Sub: true, Timeout: s.opts.DialTimeout, MaxFrameSize: 1 << 30, Security: s.sec,
	})
}

// watch pings the broker and closes conn when it has been silent for
// HeartbeatTimeout while this subscriber was reading. Silent for half an
// interval past a PING's, it hedges: a broker that serves on another
// endpoint is switched to at once (conn closed, the new connection
// returned by stop, which ends the watch).
func (s *Subscriber) watch(conn *zmtp.Conn, heard *atomic.Int64) (stop func() *zmtp.Conn) {
	done, ended := make(chan struct{}), make(chan struct{})
	var next *zmtp.Conn
	go func() {
		defer close(ended)
		hedge := zmtp.NewHedge(s.opts.Endpoint, conn.Endpoint(), s.dial)
		defer hedge.Stop()
		tick := time.NewTicker(s.opts.HeartbeatInterval / 4)
		defer tick.Stop()
		var pinged time.Time
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				n := heard.Load()
				if n < 0 { // a message waits for Recv: nothing is read meanwhile
					hedge.Calm()
					continue
				}
				silent := now.Sub(latest(time.Unix(0, n), conn.LastPong()))
				if silent >= s.opts.HeartbeatTimeout {
					s.log.Warn("client: the broker is silent; dialling every endpoint again",
						"endpoint", s.opts.Endpoint, "silent_for", silent.Round(time.Millisecond))
					conn.Close()
					return
				}
				// A PING goes every interval and a live broker answers at
				// once: silence past 1.5 intervals is a PING unanswered.
				if silent >= s.opts.HeartbeatInterval*3/2 {
					hedge.Try()
				} else {
					hedge.Calm()
				}
				if now.Sub(pinged) >= s.opts.HeartbeatInterval {
					pinged = now
					_ = conn.Ping()
				}
			case c := <-hedge.Won():
				s.log.Warn("client: another broker serves while this one is silent; the subscriber switches to it",
					"from", conn.Endpoint(), "to", c.Endpoint())
				next = c
				conn.Close() // read ends
				return
			}
		}
	}()
	return func() *zmtp.Conn { close(done); <-ended; return next }
}

func (s *Subscriber) read(conn *zmtp.Conn, heard *atomic.Int64) error {
	for {
		frames, err := conn.ReadMsg()
		if err != nil {
			return err
		}
		heard.Store(time.Now().UnixNano())
		if len(frames) != 2 {
			s.log.Warn("client: a published message should have 2 frames (topic, payload)", "frames", len(frames))
			continue
		}
		s.mu.Lock()
		wanted := s.wants(frames[0]) // a Remove may not have reached the broker yet
		s.mu.Unlock()
		if !wanted {
			continue
		}
		msg := Message{Topic: string(frames[0]), Payload: frames[1]}
		select {
		case s.in <- msg:
			continue
		default:
		}
		heard.Store(-1) // waiting for Recv is not the broker's silence
		select {
		case s.in <- msg:
			heard.Store(time.Now().UnixNano())
		case <-s.done:
			return ErrClosed
		}
	}
}
