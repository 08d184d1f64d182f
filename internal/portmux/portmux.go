// Package portmux serves two protocols on one TCP port, told apart by
// the first byte a client sends: ZMTP's greeting starts with 0xFF, which
// neither HTTP nor a TLS handshake ever does. A client that says nothing
// for a while (a browser's idle preconnect) goes to the second listener,
// which has its own timeouts.
package portmux

import (
	"bufio"
	"errors"
	"net"
	"sync"
	"time"
)

// ZMTPFirst is the first byte of every ZMTP 3 greeting.
const ZMTPFirst = 0xFF

// Split accepts from ln and hands each connection, once its first byte
// is read (or wait has passed), to zmtp when it starts with ZMTPFirst,
// else to other. Closing either closes ln and both.
func Split(ln net.Listener, wait time.Duration) (zmtp, other net.Listener) {
	m := &mux{ln: ln, wait: wait, done: make(chan struct{})}
	m.zmtp = &side{m: m, conns: make(chan net.Conn)}
	m.other = &side{m: m, conns: make(chan net.Conn)}
	go m.accept()
	return m.zmtp, m.other
}

type mux struct {
	ln          net.Listener
	wait        time.Duration
	zmtp, other *side
	once        sync.Once
	done        chan struct{}
}

func (m *mux) close() error {
	var err error
	m.once.Do(func() {
		err = m.ln.Close()
		close(m.done)
	})
	return err
}

func (m *mux) accept() {
	for {
		c, err := m.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				time.Sleep(10 * time.Millisecond) // out of file descriptors, say
				continue
			}
			m.close()
			return
		}
		go m.sort(c)
	}
}

// sort reads c's first byte and hands c on, that byte still to be read.
func (m *mux) sort(c net.Conn) {
	r := bufio.NewReaderSize(c, 16)
	c.SetReadDeadline(time.Now().Add(m.wait))
	b, err := r.Peek(1)
	c.SetReadDeadline(time.Time{})
	to := m.other
	switch {
	case err == nil && b[0] == ZMTPFirst:
		to = m.zmtp
	case err != nil && !isTimeout(err):
		c.Close() // gone before it said anything
		return
	}
	select {
	case to.conns <- &peeked{Conn: c, r: r}:
	case <-m.done:
		c.Close()
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// peeked is a connection whose first bytes sit in r.
type peeked struct {
	net.Conn
	r *bufio.Reader
}

func (p *peeked) Read(b []byte) (int, error) {
	if p.r.Buffered() > 0 {
		return p.r.Read(b)
	}
	return p.Conn.Read(b)
}

// side is one of the two listeners Split makes.
type side struct {
	m     *mux
	conns chan net.Conn
}

func (s *side) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.m.done:
		return nil, net.ErrClosed
	}
}

func (s *side) Close() error   { return s.m.close() }
func (s *side) Addr() net.Addr { return s.m.ln.Addr() }
