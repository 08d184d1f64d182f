package shards

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/store"
)

// Options say which shard a group is and where the placement is.
type Options struct {
	Shard     string   // the group's shard
	Endpoints []string // the placement's etcd, client URLs (none = the group's)
	Prefix    string   // the placement's prefix (DefaultPlacementPrefix)
	// Dial reaches another shard's broker at an admin address, where a
	// moved queue's jobs go (cmd/emq gives admin's client, with the
	// shards' shared admin token).
	Dial func(addr string) (Peer, error)
}

// DefaultOptions returns the defaults.
func DefaultOptions() Options { return Options{Prefix: DefaultPlacementPrefix} }

// Validate reports the first bad option, named as its flag; g is the
// group's.
func (o Options) Validate(g group.Options) error {
	switch {
	case !emqp.ValidShardName(o.Shard):
		return fmt.Errorf("shard: %q: a name is 1 to 64 letters, digits, '-', '_' or '.'", o.Shard)
	case !strings.HasPrefix(o.Prefix, "/") || !strings.HasSuffix(o.Prefix, "/"):
		return fmt.Errorf("placement-prefix: must start and end with /, got %q", o.Prefix)
	case strings.HasPrefix(o.Prefix, g.Prefix) && len(o.Endpoints) == 0:
		return fmt.Errorf("placement-prefix: %s is inside the group's etcd-prefix %s; give each its own", o.Prefix, g.Prefix)
	case o.Dial == nil:
		return errors.New("shards: Options.Dial is needed to move queues")
	}
	if err := group.CheckEndpoints(o.Endpoints); err != nil {
		return fmt.Errorf("placement-endpoints: %w", err)
	}
	return nil
}

// A Peer is another shard's broker, reached through its admin API
// (admin.Client is one).
type Peer interface {
	// Role is what it is in its group, and the placement version it
	// serves by.
	Role(ctx context.Context) (role group.Role, placement int64, err error)
	ImportJobs(ctx context.Context, queue string, jobs []*store.Job) (int, error)
	ForgetJobs(ctx context.Context, queue string, msgids []string) (int, error)
	// EachJobID calls fn with the msgid of each job of queue it holds.
	EachJobID(ctx context.Context, queue string, fn func(msgid string)) error
	ChangeQueue(ctx context.Context, queue string, ch broker.QueueChange) (broker.QueueInfo, error)
	ChangeTenant(ctx context.Context, queue, tenant string, ch broker.TenantChange) (store.TenantSettings, error)
	ImportSchedule(ctx context.Context, s *store.Schedule) error
}

// FindLeader is the leader of shard s, asked at each of its admin
// addresses in turn, that serves by placement version or a later one
// (0: any), and the address it answered at.
func FindLeader[P interface {
	Role(context.Context) (group.Role, int64, error)
}](ctx context.Context, s Shard, dial func(addr string) (P, error), version int64) (p P, addr string, err error) {
	if len(s.Admin) == 0 {
		return p, "", errors.New("it lists no admin address (emq shards add --shard-admin)")
	}
	var last error
	for _, addr := range s.Admin {
		peer, err := dial(addr)
		if err != nil {
			return p, "", err
		}
		role, placement, err := peer.Role(ctx)
		switch {
		case err != nil:
			last = fmt.Errorf("admin %s: %w", addr, err)
		case role != group.RoleLeader:
		case placement < version:
			last = fmt.Errorf("its leader does not serve by placement %d yet", version)
		default:
			return peer, addr, nil
		}
	}
	if last == nil {
		last = fmt.Errorf("no leader answers at %s", strings.Join(s.Admin, ","))
	}
	return p, "", last
}

// Member is a group as one shard of several. Give it to the group as
// group.Options.Beside.
type Member struct {
	opts  Options
	gopts group.Options
	log   *slog.Logger
	own   *clientv3.Client // the placement's etcd client when it is not the group's

	// The placement's client (the group's, or own), the last placement
	// read, and placed closed once one was.
	pcli      atomic.Pointer[clientv3.Client]
	placement atomic.Pointer[Placement]
	placed    chan struct{}

	mu      sync.Mutex
	broker  *broker.Broker             // while leading
	moving  map[string]context.Context // the queues this leader is moving out, and the leadership doing it (move.go)
	moveCtx context.Context            // ends with this leadership; nil until its broker serves
	track   *tracked                   // this leadership's journal, for the moves (track.go)
}

var _ group.Companion = (*Member)(nil)

// New makes the shard o.Shard of the group g.
func New(g group.Options, o Options, log *slog.Logger) (*Member, error) {
	if err := o.Validate(g); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	mb := &Member{opts: o, gopts: g, log: log, placed: make(chan struct{})}
	if len(o.Endpoints) > 0 {
		pg := g
		pg.Endpoints = o.Endpoints
		cli, err := group.NewClient(pg)
		if err != nil {
			return nil, fmt.Errorf("placement-endpoints: %w", err)
		}
		mb.own = cli
		mb.pcli.Store(cli)
	}
	return mb, nil
}

// Run follows the placement until ctx ends (group.Companion); cli is the
// group's etcd client, the placement's unless Options.Endpoints.
func (mb *Member) Run(ctx context.Context, cli *clientv3.Client) {
	if mb.own != nil {
		defer mb.own.Close()
		cli = mb.own
	}
	mb.pcli.Store(cli)
	watchPlacement(ctx, cli, mb.opts.Prefix, mb.log, mb.sawPlacement)
}

// Prepare gives a new leadership the routes to serve by, and a journal
// that notes what its writes touch for the moves (group.Companion).
func (mb *Member) Prepare(ctx context.Context, opts *broker.Options) error {
	routes, err := mb.shardRoutes(ctx)
	if err != nil {
		return err
	}
	opts.Routes, opts.Shard = routes, mb.opts.Shard
	open := opts.OpenJournal
	opts.OpenJournal = func(s broker.JournalSetup) (store.Journal, error) {
		j, err := open(s)
		if err != nil {
			return nil, err
		}
		tj := &tracked{Journal: j}
		mb.mu.Lock()
		mb.track = tj
		mb.mu.Unlock()
		return tj, nil
	}
	return nil
}

// Lead follows the placement with b while it leads, and once it serves
// carries out the moves out of this shard, until ctx ends
// (group.Companion).
func (mb *Member) Lead(ctx context.Context, b *broker.Broker) {
	mb.mu.Lock()
	mb.broker = b
	mb.mu.Unlock()
	defer func() {
		mb.mu.Lock()
		mb.broker, mb.moveCtx = nil, nil
		mb.mu.Unlock()
	}()
	if p := mb.placement.Load(); p != nil {
		_ = b.SetRoutes(p.Table()) // one that came since Prepare; an older one is refused
	}
	select {
	case <-b.Ready():
	case <-ctx.Done():
		return
	}
	mb.mu.Lock()
	mb.moveCtx = ctx
	mb.mu.Unlock()
	if p := mb.placement.Load(); p != nil {
		mb.startMoves(ctx, b, p)
	}
	<-ctx.Done()
}

// current is the leadership's broker, nil while not leading.
func (mb *Member) current() *broker.Broker {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return mb.broker
}

// Version is the version of the placement this broker serves by (0:
// none read yet).
func (mb *Member) Version() int64 {
	if p := mb.placement.Load(); p != nil {
		return p.Version
	}
	return 0
}

// sawPlacement takes a placement read from etcd: it is the one the
// leader serves by from now on.
func (mb *Member) sawPlacement(p *Placement) {
	if old := mb.placement.Load(); old != nil && old.Version > p.Version {
		return
	}
	mb.placement.Store(p)
	select {
	case <-mb.placed:
	default:
		close(mb.placed)
	}
	if b := mb.current(); b != nil {
		if err := b.SetRoutes(p.Table()); err != nil {
			mb.log.Warn("shard: the new placement leaves this shard out; serving by the last one", "version", p.Version, "err", err)
			return
		}
		mb.log.Info("shard: serving by a new placement", "version", p.Version)
		mb.mu.Lock()
		mctx := mb.moveCtx
		mb.mu.Unlock()
		if mctx != nil {
			mb.startMoves(mctx, b, p)
		}
	}
}

// shardRoutes waits for the placement (up to the group's Timeout) and
// checks that it lists this shard, with its journal where this group's
// is.
func (mb *Member) shardRoutes(ctx context.Context) (*emqp.RouteTable, error) {
	select {
	case <-mb.placed:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(mb.gopts.Timeout):
		return nil, fmt.Errorf("shard %s: the placement at %s could not be read", mb.opts.Shard, PlacementKey(mb.opts.Prefix))
	}
	p := mb.placement.Load()
	s, ok := p.Shards[mb.opts.Shard]
	switch {
	case !ok:
		return nil, fmt.Errorf("shard %s is not in the placement at %s (version %d); add it with emq shards add", mb.opts.Shard, PlacementKey(mb.opts.Prefix), p.Version)
	case s.Prefix != mb.gopts.Prefix:
		return nil, fmt.Errorf("shard %s: the placement has its journal at prefix %s, this broker's etcd-prefix is %s", mb.opts.Shard, s.Prefix, mb.gopts.Prefix)
	}
	return p.Table(), nil
}

// Info is the placement of queues on shards as the admin view shows it
// (/api/v1/shards, emq shards): the shards, their leaders, the queues
// placed on each, the moves under way.
type Info struct {
	Shard   string               `json:"shard,omitempty"` // the shard of the broker asked ("" from the CLI)
	Version int64                `json:"version"`
	Shards  []ShardInfo          `json:"shards"`
	Moving  map[string]emqp.Move `json:"moving,omitempty"`
}

// ShardInfo is one shard.
type ShardInfo struct {
	Name     string   `json:"name"`
	Leader   string   `json:"leader"` // "" = none now; "?" and Error when it could not be asked
	Error    string   `json:"error,omitempty"`
	Hashed   bool     `json:"hashed"`
	Queues   []string `json:"queues"` // placed on it explicitly
	Frontend []string `json:"frontend"`
	Backend  []string `json:"backend"`
	Admin    []string `json:"admin,omitempty"`
	Etcd     []string `json:"etcd,omitempty"`
	Prefix   string   `json:"prefix"`
}

// Describe is p as the admin view shows it, with each shard's leader
// read from its etcd: cli's when the shard names none, else one reached
// with g's credentials (an error shows as "?").
func Describe(ctx context.Context, p *Placement, cli *clientv3.Client, g group.Options) Info {
	v := Info{Version: p.Version, Moving: p.Moving, Shards: []ShardInfo{}}
	for _, name := range slices.Sorted(maps.Keys(p.Shards)) {
		s := p.Shards[name]
		si := ShardInfo{Name: name, Hashed: slices.Contains(p.Hashed, name), Queues: []string{},
			Frontend: s.Frontend, Backend: s.Backend, Admin: s.Admin, Etcd: s.Etcd, Prefix: s.Prefix}
		for q, on := range p.Queues {
			if on == name {
				si.Queues = append(si.Queues, q)
			}
		}
		slices.Sort(si.Queues)
		var err error
		if si.Leader, err = shardLeader(ctx, s, cli, g); err != nil {
			si.Leader, si.Error = "?", err.Error()
		}
		v.Shards = append(v.Shards, si)
	}
	return v
}

// shardLeader is the name of the broker leading shard s's group ("" =
// none now).
func shardLeader(ctx context.Context, s Shard, cli *clientv3.Client, g group.Options) (string, error) {
	if len(s.Etcd) > 0 {
		g.Endpoints = s.Etcd
		c, err := group.NewClient(g)
		if err != nil {
			return "", err
		}
		defer c.Close()
		cli = c
	}
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	return group.Leader(ctx, cli, s.Prefix)
}

// Shards is the placement this broker serves by, as the admin view shows
// it.
func (mb *Member) Shards(ctx context.Context) (Info, error) {
	p := mb.placement.Load()
	cli := mb.pcli.Load()
	if p == nil || cli == nil {
		return Info{}, fmt.Errorf("shard %s: the placement has not been read yet", mb.opts.Shard)
	}
	v := Describe(ctx, p, cli, mb.gopts)
	v.Shard = mb.opts.Shard
	return v, nil
}
