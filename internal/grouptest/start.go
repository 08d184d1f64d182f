package grouptest

// Everything that names package group's constructor, its types or the
// admin server's is here, so that a change of group.New's shape is
// adapted in this file alone.

import (
	"context"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/emqp"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/groupmember"
	"github.com/eventmq/emq/shards"
	"github.com/eventmq/emq/store/etcdstore"
)

// node is one member's running group and its admin listener.
type node interface {
	Run(ctx context.Context) error
	Shutdown(ctx context.Context) error
	Close() error
}

// wired runs a groupmember.Member as `emq broker` does: the admin
// listener from before the group's Run until after it.
type wired struct{ *groupmember.Member }

func (w wired) Run(ctx context.Context) error {
	if err := w.Server.Start(); err != nil {
		w.Group.Close()
		return err
	}
	defer w.Server.Close()
	return w.Group.Run(ctx)
}

// newNode makes member m's group, as `emq broker --etcd-endpoints`
// would with m's ports and the cluster's config.
func newNode(m *Member, log *slog.Logger) (node, error) {
	c := m.c
	opts := broker.DefaultOptions()
	opts.Frontend, opts.Backend = m.Frontend, m.Backend
	opts.PublisherIncoming, opts.PublisherOutgoing = "", ""
	opts.HeartbeatInterval, opts.HeartbeatTimeout = 100*time.Millisecond, time.Second
	opts.MaxJobSize = etcdstore.DefaultOptions().MaxJobSize
	opts.Logger = log
	if c.cfg.Broker != nil {
		c.cfg.Broker(m.index, &opts)
	}
	aopts := admin.DefaultOptions()
	aopts.Addr, aopts.Token, aopts.Logger = m.adminAddr, c.cfg.AdminToken, log
	aopts.MaxStreams, aopts.MaxBodyBytes = opts.MaxEventListeners, 2*int64(opts.MaxJobSize)
	g := group.DefaultOptions()
	g.Endpoints, g.Prefix, g.Name = c.etcd, c.cfg.Prefix, m.Name
	if c.cfg.LeaderTTL != 0 {
		g.LeaderTTL = c.cfg.LeaderTTL
	}
	so := shards.DefaultOptions()
	so.Shard = c.cfg.Shard
	if c.cfg.PlacementPrefix != "" {
		so.Prefix = c.cfg.PlacementPrefix
	}
	gm, err := groupmember.New(opts, aopts, g, so)
	if err != nil {
		return nil, err
	}
	m.group = gm.Group
	m.info = func() Info {
		i := gm.Info()
		info := Info{Role: i.Role, Name: i.Name, Leader: i.Leader, Elections: i.Elections}
		if gm.Shard != nil {
			info.Placement = gm.Shard.Version()
		}
		return info
	}
	return wired{gm}, nil
}

// leaderKey is the election's key of who leads the group under prefix:
// its key, its lease, and the leader's name ("" = none).
func leaderKey(ctx context.Context, cli *clientv3.Client, prefix string) (key string, lease clientv3.LeaseID, name string, err error) {
	resp, err := cli.Get(ctx, group.LeaderPrefix(prefix), append(clientv3.WithFirstCreate(), clientv3.WithPrefix())...)
	if err != nil || len(resp.Kvs) == 0 {
		return "", 0, "", err
	}
	kv := resp.Kvs[0]
	return string(kv.Key), clientv3.LeaseID(kv.Lease), string(kv.Value), nil
}

// addShard writes shard name, served by c's members, into the placement
// on cli, among the shards queues are hashed over when hashed.
func addShard(ctx context.Context, cli *clientv3.Client, placementPrefix, name string, c *Cluster, hashed bool) error {
	s := shards.Shard{Prefix: c.cfg.Prefix}
	for _, m := range c.Members {
		s.Frontend, s.Backend = append(s.Frontend, m.Frontend), append(s.Backend, m.Backend)
		s.Admin = append(s.Admin, m.adminAddr)
	}
	_, err := shards.ChangePlacement(ctx, cli, placementPrefix, func(p *shards.Placement) error {
		p.Shards[name] = s
		if hashed {
			p.Hashed = append(p.Hashed, name)
		}
		return nil
	})
	return err
}

// table is the placement under prefix as clients route by it.
func table(ctx context.Context, cli *clientv3.Client, prefix string) (*emqp.RouteTable, error) {
	p, _, err := shards.LoadPlacement(ctx, cli, prefix)
	if err != nil {
		return nil, err
	}
	return p.Table(), nil
}

// Defaults of Config.
const (
	defaultPrefix          = "/emq/"
	defaultPlacementPrefix = shards.DefaultPlacementPrefix
)
