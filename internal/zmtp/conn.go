package zmtp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/go-zeromq/zmq4/security/null"
)

// ZMTP 3.0 frame flags.
const (
	flagMore    = 0x01
	flagLong    = 0x02
	flagCommand = 0x04
)

// Limits and defaults.
const (
	// MaxFrames is the most frames one message may have unless the
	// Router's Options.MaxFrames allows more; eMQP needs 9, but for BULK.
	MaxFrames = 64
	// frameCost is what a small frame beyond MaxFrames is counted in the
	// budget besides its body: its slice header.
	frameCost = 24
	// DefaultMaxFrameSize is the largest frame body accepted by default.
	DefaultMaxFrameSize = 256 << 20

	greetingLen = 64
	readBuffer  = 64 << 10
	arenaSize   = 4 << 10
	// ArenaMax: bodies up to this size are carved from a buffer that a
	// connection's frames share (keeping one keeps the buffer alive);
	// larger ones get their own allocation.
	ArenaMax    = 512
	copyMax     = 8 << 10   // larger bodies are written from the caller's slice
	batchMax    = 256 << 10 // bytes of small frames gathered into one write
	lingerTime  = time.Second
	lingerBytes = 4 << 20 // dropped at most after a last message
)

// TooManyFramesError reports a message with more frames than allowed
// (Options.MaxFrames). Frames holds those read, so that the refusal can
// name the message; it matches ErrTooManyFrames.
type TooManyFramesError struct {
	Max    int
	Frames [][]byte
}

func (e *TooManyFramesError) Error() string {
	return fmt.Sprintf("zmtp: message has more than %d frames", e.Max)
}

// Is matches ErrTooManyFrames.
func (e *TooManyFramesError) Is(target error) bool { return target == ErrTooManyFrames }

// Errors of a connection.
var (
	ErrTooManyFrames = errors.New("zmtp: message has too many frames")
	ErrNoPeer        = errors.New("zmtp: no live connection for this routing id")
	ErrSlowPeer      = errors.New("zmtp: peer does not read; its send queue is full")
	ErrClosed        = errors.New("zmtp: closed")
	ErrNoRoom        = errors.New("zmtp: no room in the receive budget for the rest of a message")
)

// TooLargeError reports a frame header announcing more than the limit:
// MaxFrameSize, or (Budget) the room the receive budget has for the rest
// of the message. Frames holds the message's frames read before it
// (after the handshake), so that the refusal can name the message.
type TooLargeError struct {
	Size, Max uint64
	Budget    bool
	Frames    [][]byte
}

func (e *TooLargeError) Error() string {
	if e.Budget {
		return fmt.Sprintf("zmtp: frame of %d bytes does not fit in the receive budget, which holds %d more bytes of one message", e.Size, e.Max)
	}
	return fmt.Sprintf("zmtp: frame of %d bytes exceeds the limit of %d bytes", e.Size, e.Max)
}

// NoRoomError is ErrNoRoom, with the message's frames read before it.
type NoRoomError struct{ Frames [][]byte }

func (e *NoRoomError) Error() string        { return ErrNoRoom.Error() }
func (e *NoRoomError) Is(target error) bool { return target == ErrNoRoom }

// Conn is one ZMTP connection after its handshake. Reads belong to one
// goroutine; writes are serialised by the Conn.
type Conn struct {
	nc  net.Conn
	r   *bufio.Reader
	max uint64

	// Identity is the routing id the peer announced (may be empty);
	// SocketType its Socket-Type.
	Identity   []byte
	SocketType string

	hdr   [8]byte
	arena []byte

	// A Router's connections share its receive budget (nil: none).
	budget    *Budget
	held      Held          // of the message being read
	maxFrames int           // 0 = MaxFrames
	many      bool          // the message being read is past MaxFrames: small frames count too
	done      chan struct{} // closed by Close: a wait for the budget ends
	once      sync.Once

	wmu      sync.Mutex
	wbuf     []byte
	bufs     net.Buffers // reused by WriteMsgs
	wtimeout time.Duration
	keep     int // largest write buffer kept between writes; 0 = 4*batchMax

	// onCommand, when set, gets the commands ReadMsg does not answer
	// itself (a PUB's SUBSCRIBE and CANCEL); an error ends the read.
	onCommand func(name string, data []byte) error

	// Auth is what the peer proved in a PLAIN or CURVE handshake (nil:
	// NULL). curve boxes every frame after a CURVE one.
	Auth  *Auth
	curve *curveCodec

	pong atomic.Int64 // unix nanoseconds of the last PONG read

	endpoint string // as DialAny was given it; "" for a server's
}

// Ping sends a ZMTP PING (ZMTP 3.1's heartbeat, answered by the peer's
// transport, below eMQP: no eMQP peer sees it). LastPong says when the
// answer came.
func (c *Conn) Ping() error { return c.writeCommand("PING", []byte{0, 0}) }

// LastPong is when the last PONG was read (zero: none yet). ReadMsg
// reads it, so it moves only while somebody reads.
func (c *Conn) LastPong() time.Time {
	if n := c.pong.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// open runs zmq4's ZMTP handshake over nc within timeout.
func open(nc net.Conn, typ zmq4.SocketType, id []byte, server bool, max uint64, timeout time.Duration) (c *Conn, err error) {
	return openBuffered(nc, typ, id, server, max, timeout, readBuffer)
}

// openWith is open with a mechanism: ss for a server, cs for a client
// (both nil: NULL, zmq4's handshake).
func openWith(nc net.Conn, typ zmq4.SocketType, id []byte, server bool, ss *ServerSecurity, cs *ClientSecurity, max uint64, timeout time.Duration) (*Conn, error) {
	if ss == nil && cs == nil {
		return open(nc, typ, id, server, max, timeout)
	}
	return secureOpen(nc, string(typ), id, ss, cs, max, timeout, readBuffer)
}

// openBuffered is open with a read buffer of rbuf bytes.
func openBuffered(nc net.Conn, typ zmq4.SocketType, id []byte, server bool, max uint64, timeout time.Duration, rbuf int) (c *Conn, err error) {
	g := &guardConn{Conn: nc, r: bufio.NewReaderSize(nc, rbuf), max: max, greet: greetingLen}
	if timeout > 0 {
		_ = nc.SetDeadline(time.Now().Add(timeout))
	}
	defer func() {
		// zmq4's metadata parser indexes past the end of a truncated
		// property; such a peer must not take the process down.
		if p := recover(); p != nil {
			err = fmt.Errorf("zmtp: handshake with %s: malformed metadata (%v)", nc.RemoteAddr(), p)
		}
	}()
	zc, err := zmq4.Open(g, null.Security(), typ, zmq4.SocketIdentity(id), server, nil)
	if err != nil {
		return nil, fmt.Errorf("zmtp: handshake with %s: %w", nc.RemoteAddr(), err)
	}
	_ = nc.SetDeadline(time.Time{})
	return &Conn{
		nc:         nc,
		r:          g.r,
		max:        max,
		done:       make(chan struct{}),
		Identity:   []byte(zc.Peer.Meta["Identity"]),
		SocketType: zc.Peer.Meta["Socket-Type"],
	}, nil
}

// RemoteAddr is the peer's network address.
func (c *Conn) RemoteAddr() net.Addr { return c.nc.RemoteAddr() }

// SetReadDeadline bounds the next reads (zero = none).
func (c *Conn) SetReadDeadline(t time.Time) error { return c.nc.SetReadDeadline(t) }

// Close closes the connection.
func (c *Conn) Close() error {
	c.once.Do(func() { close(c.done) })
	return c.nc.Close()
}

// ReadMsg returns the next message. It answers PING itself and skips the
// other ZMTP commands. The frames are the caller's to keep.
func (c *Conn) ReadMsg() ([][]byte, error) {
	frames, held, err := c.readMsg()
	c.budget.Release(held) // a dialled Conn has none
	return frames, err
}

// readMsg is ReadMsg with what the message holds of the budget, for the
// receiver to release; on an error it holds nothing.
func (c *Conn) readMsg() (_ [][]byte, _ Held, err error) {
	frames := make([][]byte, 0, 8) // an eMQP message has 4 to 9, but for BULK
	c.held, c.many = Held{}, false
	defer func() {
		if err != nil { // what the message held is given back
			c.budget.Release(c.held)
		}
	}()
	for {
		flags, body, err := c.readFrame()
		if err == nil && c.curve != nil {
			flags, body, err = c.unbox(flags, body)
		}
		if err != nil {
			switch e := err.(type) {
			case *TooLargeError:
				e.Frames = frames
			case *NoRoomError:
				e.Frames = frames
			}
			return nil, Held{}, err
		}
		if flags&flagCommand != 0 {
			if len(frames) > 0 {
				return nil, Held{}, errors.New("zmtp: command frame inside a message")
			}
			if err := c.command(body); err != nil {
				return nil, Held{}, err
			}
			c.budget.Release(c.held) // a command's frame is not kept
			c.held = Held{}
			continue
		}
		if len(frames) == max(c.maxFrames, MaxFrames) {
			return nil, Held{}, &TooManyFramesError{Max: len(frames), Frames: frames}
		}
		frames = append(frames, body)
		// Past MaxFrames (a BULK) the arena's small frames are counted in
		// the budget too, with their slice headers: many small frames
		// hold memory as one large one does.
		c.many = len(frames) >= MaxFrames
		if flags&flagMore == 0 {
			return frames, c.held, nil
		}
	}
}

func (c *Conn) readFrame() (byte, []byte, error) {
	flags, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, err
	}
	short, err := c.r.ReadByte()
	if err != nil {
		return 0, nil, unexpected(err)
	}
	size := uint64(short)
	if flags&flagLong != 0 {
		c.hdr[0] = short
		if _, err := io.ReadFull(c.r, c.hdr[1:]); err != nil {
			return 0, nil, unexpected(err)
		}
		size = binary.BigEndian.Uint64(c.hdr[:])
	}
	if size > c.max {
		return 0, nil, &TooLargeError{Size: size, Max: c.max}
	}
	if c.budget != nil && size <= ArenaMax && c.many {
		n := int64(size) + frameCost
		if limit := c.budget.pools[0].max; c.held.small+n > limit { // the small pool's, set once
			return 0, nil, &TooLargeError{Size: size, Max: uint64(max(limit-c.held.small, 0)), Budget: true}
		}
		t := time.NewTimer(minGrace) // the message holds room already
		defer t.Stop()
		if !c.budget.acquire(n, c.done, t.C) {
			return 0, nil, &NoRoomError{}
		}
		c.held.add(n)
	}
	if c.budget != nil && size > ArenaMax {
		copies := uint64(1)
		if c.curve != nil {
			copies = 2 // the box, and the frame it opens to: unbox gives the box's back
		}
		if limit := c.budget.Max(); uint64(c.held.total())+copies*size > limit {
			return 0, nil, &TooLargeError{Size: size, Max: (limit - uint64(c.held.total())) / copies, Budget: true}
		}
		for range copies {
			var timeout <-chan time.Time
			if c.held != (Held{}) {
				t := time.NewTimer(minGrace)
				defer t.Stop()
				timeout = t.C
			}
			if !c.budget.acquire(int64(size), c.done, timeout) {
				return 0, nil, &NoRoomError{}
			}
			c.held.add(int64(size))
		}
	}
	body, err := c.readBody(int(size))
	if err != nil {
		return 0, nil, unexpected(err)
	}
	return flags, body, nil
}

// unbox opens a CURVE connection's MESSAGE (a data frame, or a command
// frame as some peers send it).
func (c *Conn) unbox(flags byte, msg []byte) (byte, []byte, error) {
	if flags&flagMore != 0 {
		return 0, nil, errors.New("zmtp: CURVE: a MESSAGE with the more flag")
	}
	if flags&flagCommand != 0 && len(msg) > 0 && int(msg[0]) < len(msg) && string(msg[1:1+int(msg[0])]) != "MESSAGE" {
		return 0, nil, errors.New("zmtp: CURVE: a command outside a MESSAGE")
	}
	var out []byte
	if n := len(msg); n <= ArenaMax {
		out = c.alloc(n)
	} else {
		out = make([]byte, n)
	}
	flags, body, err := c.curve.open(msg, out)
	if err == nil && c.budget != nil && len(msg) > ArenaMax { // the box is garbage now: its share goes back
		var box Held
		box.add(int64(len(msg)))
		c.budget.Release(box)
		c.held.sub(box)
	}
	return flags, body, err
}

// Reading a frame's body. A Router's connection (one with a budget) must
// receive a body that is not buffered yet at minRate or better, after a
// grace period, or it is dropped: a sender cannot hold budget room for
// ever by trickling. A large body is allocated whole only once its first
// firstChunk bytes have come.
const (
	minRate    = 1 << 20 // bytes a second
	minGrace   = 10 * time.Second
	firstChunk = 1 << 20
)

// readBody reads a frame's body of n bytes.
func (c *Conn) readBody(n int) ([]byte, error) {
	if n <= ArenaMax {
		body := c.alloc(n)
		_, err := io.ReadFull(c.r, body)
		return body, err
	}
	if c.budget != nil && c.r.Buffered() < n {
		_ = c.nc.SetReadDeadline(time.Now().Add(minGrace + time.Duration(n/minRate)*time.Second))
		defer c.nc.SetReadDeadline(time.Time{})
	}
	if n <= firstChunk {
		body := make([]byte, n)
		_, err := io.ReadFull(c.r, body)
		return body, err
	}
	first := make([]byte, firstChunk)
	if _, err := io.ReadFull(c.r, first); err != nil {
		return nil, err
	}
	body := make([]byte, n)
	copy(body, first)
	_, err := io.ReadFull(c.r, body[firstChunk:])
	return body, err
}

// alloc carves small bodies (up to ArenaMax) from a shared arena. A body that is kept keeps
// its arena alive, so the arena stays small.
func (c *Conn) alloc(n int) []byte {
	if n == 0 {
		return nil
	}
	if cap(c.arena)-len(c.arena) < n {
		c.arena = make([]byte, 0, arenaSize)
	}
	i := len(c.arena)
	c.arena = c.arena[:i+n]
	return c.arena[i : i+n : i+n]
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// command handles a ZMTP command frame after the handshake.
func (c *Conn) command(body []byte) error {
	if len(body) == 0 || int(body[0]) > len(body)-1 {
		return errors.New("zmtp: malformed command frame")
	}
	n := int(body[0]) // as an int: 1+255 must not wrap
	name, data := string(body[1:1+n]), body[1+n:]
	switch name {
	case "PING":
		// TTL (2 bytes), then a context of up to 16 bytes to echo.
		var ctx []byte
		if len(data) > 2 {
			ctx = data[2:min(len(data), 18)]
		}
		return c.writeCommand("PONG", ctx)
	case "PONG":
		c.pong.Store(time.Now().UnixNano())
		return nil
	case "ERROR":
		return fmt.Errorf("zmtp: peer reported an error: %q", data)
	}
	if c.onCommand != nil {
		return c.onCommand(name, data)
	}
	return nil // PONG, SUBSCRIBE, ...: nothing to do
}

func (c *Conn) writeCommand(name string, data []byte) error {
	body := make([]byte, 0, 1+len(name)+len(data))
	body = append(append(append(body, byte(len(name))), name...), data...)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	var b []byte
	if c.curve != nil {
		b = c.curve.seal(c.wbuf[:0], curveFlagComand, body)
	} else {
		b = appendHeader(c.wbuf[:0], flagCommand, len(body))
		b = append(b, body...)
	}
	c.wbuf = b
	c.bufs = append(c.bufs[:0], b)
	return c.write(c.bufs)
}

// WriteMsgs writes messages, each a list of frames, in as few system calls
// as it can: small frames are copied into one buffer, large bodies are
// passed to writev as they are.
func (c *Conn) WriteMsgs(msgs ...[][]byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.curve != nil {
		return c.writeBoxed(msgs)
	}
	bufs := c.bufs[:0]
	b, mark := c.wbuf[:0], 0
	for _, msg := range msgs {
		for i, f := range msg {
			var flags byte
			if i < len(msg)-1 {
				flags = flagMore
			}
			b = appendHeader(b, flags, len(f))
			if len(f) <= copyMax {
				b = append(b, f...)
				continue
			}
			bufs = append(bufs, b[mark:len(b):len(b)], f)
			mark = len(b)
		}
	}
	if mark < len(b) || len(bufs) == 0 {
		bufs = append(bufs, b[mark:])
	}
	if keep := c.keep; cap(b) <= keep || keep == 0 && cap(b) <= 4*batchMax {
		c.wbuf = b
	}
	err := c.write(bufs)
	clear(bufs[:cap(bufs)]) // keep no caller's body alive
	c.bufs = bufs[:0]
	return err
}

// writeBoxed is WriteMsgs on a CURVE connection: every frame boxed in
// a MESSAGE, all in one buffer. The caller holds wmu.
func (c *Conn) writeBoxed(msgs [][][]byte) error {
	b := c.wbuf[:0]
	for _, msg := range msgs {
		for i, f := range msg {
			var flags byte
			if i < len(msg)-1 {
				flags = curveFlagMore
			}
			b = c.curve.seal(b, flags, f)
		}
	}
	if keep := c.keep; cap(b) <= keep || keep == 0 && cap(b) <= 4*batchMax {
		c.wbuf = b
	}
	c.bufs = append(c.bufs[:0], b)
	return c.write(c.bufs)
}

// write sends bufs with the write deadline; the caller holds wmu.
func (c *Conn) write(bufs net.Buffers) error {
	if c.wtimeout > 0 {
		_ = c.nc.SetWriteDeadline(time.Now().Add(c.wtimeout))
	}
	_, err := bufs.WriteTo(c.nc)
	return err
}

func appendHeader(b []byte, flags byte, n int) []byte {
	if n > 255 {
		return binary.BigEndian.AppendUint64(append(b, flags|flagLong), uint64(n))
	}
	return append(b, flags, byte(n))
}

// msgSize is the number of bytes msg takes on the wire.
func msgSize(msg [][]byte) int {
	n := 0
	for _, f := range msg {
		n += 2 + len(f)
		if len(f) > 255 {
			n += 7
		}
	}
	return n
}

// guardConn is the net.Conn zmq4 runs its handshake over. It reads through
// the buffer the Conn keeps using afterwards, and follows the ZMTP stream
// (the greeting, then frame headers) so that a frame over the limit fails
// the read before zmq4 allocates for it.
type guardConn struct {
	net.Conn
	r     *bufio.Reader
	max   uint64
	greet int     // greeting bytes still to pass
	hdr   [9]byte // the frame header being read
	hn    int
	body  uint64 // body bytes still to pass
}

func (g *guardConn) Read(p []byte) (int, error) {
	n, err := g.r.Read(p)
	if e := g.scan(p[:n]); e != nil {
		return 0, e
	}
	return n, err
}

func (g *guardConn) scan(b []byte) error {
	for len(b) > 0 {
		switch {
		case g.greet > 0:
			k := min(g.greet, len(b))
			g.greet -= k
			b = b[k:]
		case g.body > 0:
			k := min(g.body, uint64(len(b)))
			g.body -= k
			b = b[k:]
		default:
			g.hdr[g.hn] = b[0]
			g.hn++
			b = b[1:]
			switch {
			case g.hn < 2:
			case g.hdr[0]&flagLong == 0:
				g.body, g.hn = uint64(g.hdr[1]), 0
			case g.hn == 9:
				g.body, g.hn = binary.BigEndian.Uint64(g.hdr[1:]), 0
				if g.body > g.max {
					return &TooLargeError{Size: g.body, Max: g.max}
				}
			}
		}
	}
	return nil
}

// hostPort turns "tcp://host:port" into "host:port"; "*" means every
// interface.
func hostPort(endpoint string) (string, error) {
	addr, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", fmt.Errorf("endpoint %q: only tcp://host:port is supported", endpoint)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	if host == "*" {
		host = ""
	}
	return net.JoinHostPort(host, port), nil
}
