package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/go-zeromq/zmq4"
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
// the error holds each one's.
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
	nc, err := connectAny(ctx, addrs, opts.Timeout)
	if err != nil {
		return nil, err
	}
	typ := zmq4.Dealer
	if opts.Sub {
		typ = zmq4.Sub
	}
	c, err := openWith(nc, typ, opts.Identity, false, nil, opts.Security, uint64(opts.MaxFrameSize), opts.Timeout)
	if err != nil {
		nc.Close()
		return nil, err
	}
	c.wtimeout = opts.WriteTimeout
	return c, nil
}

// connectAny makes a TCP connection to each of addrs at once and returns
// the first whose server has begun its greeting; the others are closed,
// before this peer has said who it is. A server's kernel completes TCP
// connections for a process that does not run (stopped, frozen: a paused
// leader), so the first connection made may lead nowhere; the first to
// speak is a broker that serves.
func connectAny(ctx context.Context, addrs []string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if len(addrs) == 1 {
		return d.DialContext(ctx, "tcp", addrs[0])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the connects still under way give up
	type result struct {
		nc  net.Conn
		err error
	}
	results := make(chan result, len(addrs))
	for _, addr := range addrs {
		go func() {
			nc, err := d.DialContext(ctx, "tcp", addr)
			if err == nil {
				if err = greeted(ctx, nc, timeout); err != nil {
					nc.Close()
					nc = nil
				}
			}
			results <- result{nc, err}
		}()
	}
	var errs []error
	for i := range addrs {
		r := <-results
		if r.err == nil {
			go func() { // the others end at once, cancelled; any made is closed
				for range len(addrs) - i - 1 {
					if late := <-results; late.nc != nil {
						late.nc.Close()
					}
				}
			}()
			return r.nc, nil
		}
		errs = append(errs, r.err)
	}
	return nil, errors.Join(errs...)
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
