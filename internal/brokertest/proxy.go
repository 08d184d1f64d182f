package brokertest

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a target endpoint and can be paused:
// what a peer sees of a process that is stopped or frozen (SIGSTOP, a VM
// freeze). Paused, it forwards nothing either way and closes nothing; a
// connection made meanwhile is completed (as the kernel's backlog does)
// and says nothing until Resume.
type Proxy struct {
	t      testing.TB
	ln     net.Listener
	target string

	mu      sync.Mutex
	resumed chan struct{} // closed while not paused
	closed  bool
	conns   []net.Conn
	made    int // connections accepted
	pending int // bytes read while paused, not yet forwarded
}

// NewProxy listens on a free loopback port and forwards to target
// (tcp://host:port); it is closed when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{t: t, ln: ln, target: strings.TrimPrefix(target, "tcp://"), resumed: make(chan struct{})}
	close(p.resumed)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Endpoint is where peers dial the proxy.
func (p *Proxy) Endpoint() string { return "tcp://" + p.ln.Addr().String() }

// Pause stops all forwarding until Resume.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
		p.resumed = make(chan struct{})
	default:
	}
}

// Resume forwards again what was held.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.resumed:
	default:
		close(p.resumed)
	}
}

// Close stops the proxy and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	conns := p.conns
	p.mu.Unlock()
	p.Resume()
	p.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}

// gate waits while the proxy is paused; false once it is closed.
func (p *Proxy) gate() bool {
	p.mu.Lock()
	ch, closed := p.resumed, p.closed
	p.mu.Unlock()
	<-ch
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && !closed
}

// Pending is how many bytes the proxy holds, read while paused.
func (p *Proxy) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

// Accepted is how many connections peers have made to the proxy, paused
// or not.
func (p *Proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.made
}

func (p *Proxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.made++
		p.conns = append(p.conns, in)
		p.mu.Unlock()
		go p.forward(in)
	}
}

// forward connects in to the target once not paused.
func (p *Proxy) forward(in net.Conn) {
	if !p.gate() {
		in.Close()
		return
	}
	out, err := net.Dial("tcp", p.target)
	if err != nil {
		in.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, out)
	closed := p.closed
	p.mu.Unlock()
	if closed {
		in.Close()
		out.Close()
		return
	}
	go p.pipe(in, out)
	go p.pipe(out, in)
}

// pipe copies src to dst chunk by chunk, each chunk (and the end) only
// while not paused.
func (p *Proxy) pipe(src, dst net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		held := 0
		select {
		case <-p.resumed:
		default:
			held = n
			p.pending += n
		}
		p.mu.Unlock()
		ok := p.gate()
		p.mu.Lock()
		p.pending -= held
		p.mu.Unlock()
		if !ok {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				src.Close()
			}
			return
		}
	}
}
