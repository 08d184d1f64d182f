package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/eventmq/emq/internal/redial"
)

// DialOptions configure Dial.
type DialOptions struct {
	Identity     []byte        // routing id to announce; empty = let the ROUTER pick
	MaxFrameSize int64         // largest frame body accepted; 0 = DefaultMaxFrameSize
	WriteTimeout time.Duration // a write blocked this long fails; 0 = 10s
	Timeout      time.Duration // for connect and handshake; 0 = 5s
	// Sub connects a SUB socket (to a PUB) instead of a DEALER: it
	// subscribes by writing the message 0x01 prefix (0x00 prefix cancels).
	Sub bool
	// Security is the mechanism to use (nil = NULL).
	Security *ClientSecurity
}

// Dial connects a DEALER to a ROUTER (or a SUB to a PUB) at endpoint ("tcp://host:port") and
// runs the handshake. The Conn is one connection: when it breaks, make a
// new one. Send with WriteMsgs (safe for concurrent use), read with
// ReadMsg from one goroutine.
func Dial(ctx context.Context, endpoint string, opts DialOptions) (*Conn, error) {
	return DialAny(ctx, endpoint, opts)
}

func (o *DialOptions) setDefaults() {
	if o.MaxFrameSize <= 0 {
		o.MaxFrameSize = DefaultMaxFrameSize
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 10 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
}

// SplitEndpoints reads a comma-separated list of endpoints, each once.
func SplitEndpoints(s string) []string {
	var out []string
	for ep := range strings.SplitSeq(s, ",") {
		if ep = strings.TrimSpace(ep); ep != "" && !slices.Contains(out, ep) {
			out = append(out, ep)
		}
	}
	return out
}

// DialAny connects to each of endpoints (comma-separated) at once, keeps
// the first connection whose server begins its greeting (connectAny),
// closes the others, and runs the handshake on it alone. Of replicated brokers, where only the leader
// listens, it finds the leader; two endpoints that reach one broker
// cannot race each other for its routing id. When no endpoint accepts,
// the error holds each one's. It gives up when ctx ends, in the
// handshake too.
func DialAny(ctx context.Context, endpoints string, opts DialOptions) (*Conn, error) {
	opts.setDefaults()
	list := SplitEndpoints(endpoints)
	if len(list) == 0 {
		return nil, fmt.Errorf("no endpoint in %q", endpoints)
	}
	addrs := make([]string, len(list))
	for i, ep := range list {
		addr, err := hostPort(ep)
		if err != nil {
			return nil, err
		}
		addrs[i] = addr
	}
	nc, i, err := connectAny(ctx, addrs, opts.Timeout)
	if err != nil {
		return nil, err
	}
	typ := zmq4.Dealer
	if opts.Sub {
		typ = zmq4.Sub
	}
	giveUp := context.AfterFunc(ctx, func() { nc.Close() }) // the handshake ends with ctx
	c, err := openWith(nc, typ, opts.Identity, false, nil, opts.Security, uint64(opts.MaxFrameSize), opts.Timeout)
	if !giveUp() { // ctx ended: nc is closed, or being closed
		if err == nil {
			c.Close()
		}
		return nil, fmt.Errorf("zmtp: handshake with %s: %w", list[i], ctx.Err())
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.wtimeout = opts.WriteTimeout
	c.endpoint = list[i]
	return c, nil
}

// Endpoint is the endpoint, as listed to DialAny, this connection was
// made to ("" for a server's).
func (c *Conn) Endpoint() string { return c.endpoint }

// connectAny makes a TCP connection to each of addrs at once and returns
// the first whose server has begun its greeting, and its index; the
// others are closed, before this peer has said who it is. A server's
// kernel completes TCP connections for a process that does not run
// (stopped, frozen: a paused leader), so the first connection made may
// lead nowhere; the first to speak is a broker that serves. While one
// connection waits for its greeting, an address that refused is dialled
// again, at the redial pace: the standby of a paused leader begins to
// listen when it takes over, and is taken then, not after timeout.
func connectAny(ctx context.Context, addrs []string, timeout time.Duration) (net.Conn, int, error) {
	d := net.Dialer{Timeout: timeout}
	if len(addrs) == 1 {
		nc, err := d.DialContext(ctx, "tcp", addrs[0])
		return nc, 0, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the connects still under way give up
	type result struct {
		nc  net.Conn
		i   int
		err error
	}
	results := make(chan result, len(addrs))
	var busy atomic.Int32 // addresses connecting or waiting for their greeting
	for i, addr := range addrs {
		go func() {
			pace := redial.New(MaxRedial(strings.Join(addrs, ",")))
			for {
				busy.Add(1)
				nc, err := d.DialContext(ctx, "tcp", addr)
				if err == nil {
					if err = greeted(ctx, nc, timeout); err != nil {
						nc.Close()
						nc = nil
					}
					busy.Add(-1)
					results <- result{nc, i, err}
					return
				}
				// Refused (or failed): again while another may still speak.
				if busy.Add(-1) == 0 || !redial.Wait(pace.Next(), ctx.Done()) {
					results <- result{nil, i, err}
					return
				}
			}
		}()
	}
	var errs []error
	for n := range addrs {
		r := <-results
		if r.err == nil {
			go func() { // the others end at once, cancelled; any made is closed
				for range len(addrs) - n - 1 {
					if late := <-results; late.nc != nil {
						late.nc.Close()
					}
				}
			}()
			return r.nc, r.i, nil
		}
		errs = append(errs, r.err)
	}
	return nil, 0, errors.Join(errs...)
}

// MaxRedial is how long a peer waits at most between attempts to reach
// endpoints: 2 s for one broker; 500 ms for several (a replicated group),
// where an attempt is a refused connect until the next leader binds, and
// the wait would add to the failover.
func MaxRedial(endpoints string) time.Duration {
	if len(SplitEndpoints(endpoints)) > 1 {
		return 500 * time.Millisecond
	}
	return 2 * time.Second
}
