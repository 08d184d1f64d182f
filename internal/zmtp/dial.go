package zmtp

import (
	"context"
	"errors"
	"fmt"
	"net"
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
	if opts.MaxFrameSize <= 0 {
		opts.MaxFrameSize = DefaultMaxFrameSize
	}
	if opts.WriteTimeout <= 0 {
		opts.WriteTimeout = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	addr, err := hostPort(endpoint)
	if err != nil {
		return nil, err
	}
	d := net.Dialer{Timeout: opts.Timeout}
	nc, err := d.DialContext(ctx, "tcp", addr)
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

// SplitEndpoints reads a comma-separated list of endpoints.
func SplitEndpoints(s string) []string {
	var out []string
	for ep := range strings.SplitSeq(s, ",") {
		if ep = strings.TrimSpace(ep); ep != "" {
			out = append(out, ep)
		}
	}
	return out
}

// DialAny dials each of endpoints (comma-separated) at once and returns
// the first connection whose handshake completes; the others are closed
// as they come. Of replicated brokers, where only the leader listens, it
// finds the leader. When none answers, the error holds each one's.
func DialAny(ctx context.Context, endpoints string, opts DialOptions) (*Conn, error) {
	list := SplitEndpoints(endpoints)
	switch len(list) {
	case 0:
		return nil, fmt.Errorf("no endpoint in %q", endpoints)
	case 1:
		return Dial(ctx, list[0], opts)
	}
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		c   *Conn
		err error
	}
	results := make(chan result, len(list))
	for _, ep := range list {
		go func() {
			c, err := Dial(ctx, ep, opts)
			results <- result{c, err}
		}()
	}
	var errs []error
	for i := range list {
		r := <-results
		if r.err == nil {
			cancel()    // the dials still connecting give up
			go func() { // the handshakes under way end within their timeout
				for range len(list) - i - 1 {
					if late := <-results; late.c != nil {
						late.c.Close()
					}
				}
			}()
			return r.c, nil
		}
		errs = append(errs, r.err)
	}
	cancel()
	return nil, errors.Join(errs...)
}
