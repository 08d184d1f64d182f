package client

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/eventmq/emq/emqp"
)

// Shards. When queues are spread over several broker groups (shards),
// each queue's jobs must go to the shard that serves it. The client asks
// the broker it was given where queues are served (ROUTES, once, before
// its first job) and sends each job to its queue's shard, over one
// connection per shard it uses (a Client of its own, with the same
// routing id). A broker that does not serve a queue answers ERROR moved,
// naming the shard that does and the placement's version: the client
// reads the placement again from that shard and sends the job there,
// with the same msgid. A broker that is not a shard answers ROUTES with
// an empty table (an older one with ERROR unknown_command): every job
// then goes to it, as before.

// shards routes a Client's jobs by queue.
type shards struct {
	seed  *Client
	once  sync.Once // the first ROUTES, asked of the seed
	mu    sync.Mutex
	table *emqp.RouteTable   // nil: no shards known
	links map[string]*Client // other shards' connections, by their endpoints
}

// maxHops bounds how often one job follows ERROR moved: a placement
// being changed answers differently for a moment, never for long.
const maxHops = 8

// routed sends the message msg makes for queue to the queue's shard,
// following ERROR moved.
func (c *Client) routed(ctx context.Context, queue string, wantReply bool, opts []Option, msg func(msgid string, h emqp.Headers) emqp.Message) (string, []byte, error) {
	if c.shards == nil {
		return c.do(ctx, wantReply, opts, msg)
	}
	l, err := c.shards.link(ctx, queue)
	if err != nil {
		return "", nil, err
	}
	for hop := 1; ; hop++ {
		id, reply, err := l.do(ctx, wantReply, opts, msg)
		var be *BrokerError
		if !errors.As(err, &be) || be.Code != emqp.CodeMoved || hop == maxHops {
			return id, reply, err
		}
		mv, ok := emqp.ParseMoved(be.Text)
		if !ok {
			return id, reply, err
		}
		next, lerr := c.shards.moved(ctx, queue, mv)
		if lerr != nil {
			return id, nil, lerr
		}
		if next == l { // told to go where it went: the placement is changing
			select {
			case <-ctx.Done():
				return id, nil, err
			case <-time.After(time.Duration(hop) * 50 * time.Millisecond):
			}
		}
		l, opts = next, append(slices.Clip(opts), MsgID(id))
	}
}

// link is the connection to queue's shard, asking the seed for the
// placement first if nobody has yet.
func (s *shards) link(ctx context.Context, queue string) (*Client, error) {
	s.once.Do(func() { s.fetch(ctx, s.seed) })
	s.mu.Lock()
	defer s.mu.Unlock()
	owner := s.table.Owner(queue)
	if owner == "" {
		return s.seed, nil
	}
	return s.linkTo(s.table.Shards[owner].Frontend)
}

// moved takes ERROR moved's word: the placement is read again from the
// shard it names (or, if that fails, patched with what it says), and
// the connection to that shard returned.
func (s *shards) moved(ctx context.Context, queue string, mv emqp.Moved) (*Client, error) {
	s.mu.Lock()
	l, err := s.linkTo(mv.Endpoints)
	stale := s.table == nil || s.table.Version < mv.Version
	s.mu.Unlock()
	if err != nil || !stale {
		return l, err
	}
	if s.fetch(ctx, l) {
		return l, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil || s.table.Version < mv.Version {
		t := &emqp.RouteTable{Version: mv.Version, Shards: map[string]emqp.ShardRoute{}, Queues: map[string]string{}}
		if s.table != nil {
			t.Hashed = s.table.Hashed
			for k, v := range s.table.Shards {
				t.Shards[k] = v
			}
			for k, v := range s.table.Queues {
				t.Queues[k] = v
			}
		}
		t.Shards[mv.Shard] = emqp.ShardRoute{Frontend: mv.Endpoints, Backend: t.Shards[mv.Shard].Backend}
		t.Queues[queue] = mv.Shard
		s.table = t
	}
	return l, nil
}

// fetch asks l for the placement and keeps it if it is newer than the
// one known; false when l gave none.
func (s *shards) fetch(ctx context.Context, l *Client) bool {
	t, err := l.routes(ctx)
	if err != nil {
		l.log.Debug("client: no placement of shards from the broker", "broker", l.opts.Broker, "err", err)
		return false
	}
	if len(t.Shards) == 0 {
		return true // not a shard: every job goes to the seed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil || s.table.Version <= t.Version {
		s.table = t
	}
	return true
}

// Routes asks the broker where queues are served (ROUTES): an empty
// table from a broker that is not one shard of several.
func (c *Client) Routes(ctx context.Context) (*emqp.RouteTable, error) { return c.routes(ctx) }

// routes asks the broker for its placement (ROUTES), waiting at most
// ResendAfter or 2 s: a broker that does not answer ROUTES (not EMQ's)
// holds the first job no longer.
func (c *Client) routes(ctx context.Context) (*emqp.RouteTable, error) {
	ctx, cancel := context.WithTimeout(ctx, min(c.opts.ResendAfter, 2*time.Second))
	defer cancel()
	_, b, err := c.do(ctx, true, nil, func(id string, _ emqp.Headers) emqp.Message { return &emqp.Routes{MsgID: id} })
	if err != nil {
		return nil, err
	}
	return emqp.ParseRouteTable(b)
}

// linkTo is the connection to the shard at endpoints (s.mu held).
func (s *shards) linkTo(endpoints []string) (*Client, error) {
	key := strings.Join(endpoints, ",")
	if key == s.seed.opts.Broker {
		return s.seed, nil
	}
	if l := s.links[key]; l != nil {
		return l, nil
	}
	s.seed.mu.Lock()
	closed := s.seed.closed
	s.seed.mu.Unlock()
	if closed { // a call racing Close: no new connection outlives it
		return nil, ErrClosed
	}
	opts := s.seed.opts
	opts.Broker = key
	l, err := newClient(opts)
	if err != nil {
		return nil, err
	}
	s.links[key] = l
	return l, nil
}

// everyShard is a connection to each shard the placement lists, the
// seed's first.
func (s *shards) everyShard() []*Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []*Client{s.seed}
	if s.table != nil {
		for _, sh := range s.table.Shards {
			if l, err := s.linkTo(sh.Frontend); err == nil && !slices.Contains(out, l) {
				out = append(out, l)
			}
		}
	}
	return out
}

// close closes the other shards' connections.
func (s *shards) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.links {
		l.Close()
	}
}
