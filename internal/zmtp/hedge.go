package zmtp

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/eventmq/emq/internal/redial"
)

// Hedge dials, in the background, the endpoints of a group other than
// the one a peer is connected to, while that one is silent. Only a
// serving broker listens on a group's eMQP ports (a standby binds them
// when it takes over), so a connection made there, greeting and
// handshake done, means a takeover: the peer switches to it at once,
// instead of waiting for its silence timeout. The connection it is on
// stays meanwhile: a broker that is only slow keeps its peers, and with
// one endpoint there is nothing to dial.
//
//	h := zmtp.NewHedge(endpoints, conn.Endpoint(), dial)
//	defer h.Stop()
//	... silent a while: h.Try()   spoke again: h.Calm()
//	case next := <-h.Won(): switch to next
//
// Attempts are one at a time, paced as a redial (internal/redial):
// after a failed one the next waits 50 ms, then twice as long each
// time, up to MaxRedial. Methods are safe for concurrent use.
type Hedge struct {
	others string // comma-separated; "" = nothing to dial
	dial   func(ctx context.Context, endpoints string) (*Conn, error)
	won    chan *Conn // the connection an attempt made (one at most)

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pace    *redial.Backoff
	busy    bool      // an attempt under way, or one won
	next    time.Time // no attempt before
	stopped bool
}

// NewHedge makes a Hedge over endpoints (comma-separated, as DialAny
// takes them) but current, the one connected to; dial makes a
// connection to endpoints (DialAny, and for a worker its INFORM) and
// must end when ctx does.
func NewHedge(endpoints, current string, dial func(ctx context.Context, endpoints string) (*Conn, error)) *Hedge {
	var others []string
	for _, ep := range SplitEndpoints(endpoints) {
		if ep != current {
			others = append(others, ep)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Hedge{others: strings.Join(others, ","), dial: dial, won: make(chan *Conn, 1),
		ctx: ctx, cancel: cancel, pace: redial.New(MaxRedial(endpoints))}
}

// Try starts an attempt, unless there is nothing to dial, one is under
// way or won, or the last failed less than its pace ago.
func (h *Hedge) Try() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.others == "" || h.busy || h.stopped || time.Now().Before(h.next) {
		return
	}
	h.busy = true
	h.wg.Go(func() {
		conn, err := h.dial(h.ctx, h.others)
		h.mu.Lock()
		defer h.mu.Unlock()
		if err != nil || h.stopped {
			if conn != nil {
				conn.Close()
			}
			h.busy, h.next = false, time.Now().Add(h.pace.Next())
			return
		}
		h.won <- conn // busy stays: one connection is enough
	})
}

// Calm says the current broker spoke again: the next attempt, when one
// is needed, is made at once.
func (h *Hedge) Calm() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pace.Reset()
	h.next = time.Time{}
}

// Won yields the connection an attempt made: a broker that serves on
// another endpoint. The receiver owns it.
func (h *Hedge) Won() <-chan *Conn { return h.won }

// Stop ends an attempt under way and closes a connection won and not
// taken from Won.
func (h *Hedge) Stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	select {
	case conn := <-h.won:
		conn.Close()
	default:
	}
}
