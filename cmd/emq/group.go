package main

import (
	"context"

	"github.com/eventmq/emq/admin"
	"github.com/eventmq/emq/broker"
	"github.com/eventmq/emq/group"
	"github.com/eventmq/emq/internal/groupmember"
	"github.com/eventmq/emq/shards"
)

// newGroup wires a broker of a replicated group (package groupmember):
// the caller starts its admin listener, then runs the group.
func newGroup(c *config, opts broker.Options, aopts admin.Options, g group.Options) (*group.Group, *admin.Server, error) {
	so, err := shardOptions(c, g, aopts)
	if err != nil {
		return nil, nil, err
	}
	m, err := groupmember.New(opts, aopts, g, so)
	if err != nil {
		return nil, nil, err
	}
	return m.Group, m.Server, nil
}

// shardOptions reads --shard and the placement's flags; Shard "" when
// the group is not a shard. Moves reach the other shards' admin APIs
// with this broker's admin token: shards share theirs.
func shardOptions(c *config, g group.Options, aopts admin.Options) (shards.Options, error) {
	so := shards.DefaultOptions()
	b := reader()
	shardFlags(b, &so)
	if err := b.apply(c); err != nil || so.Shard == "" {
		return shards.Options{}, err
	}
	so.Dial = func(addr string) (shards.Peer, error) {
		return admin.NewClient(admin.ClientOptions{Addr: addr, Token: aopts.Token})
	}
	return so, so.Validate(g)
}

// shardFlags declares emq broker's flags of a shard.
func shardFlags(b *binder, so *shards.Options) {
	b.str(&so.Shard, "shard", "with --etcd-endpoints: the group is this shard of several, and takes jobs only for the queues the placement puts on it (emq shards)")
	placementFlags(b, so)
}

// shardAdmin is an admin client of shard s's leader, found at its admin
// addresses, with o's token and CA (shardAdminFlags).
func shardAdmin(ctx context.Context, o admin.ClientOptions, s shards.Shard) (*admin.Client, string, error) {
	return shards.FindLeader(ctx, s, func(addr string) (*admin.Client, error) {
		o.Addr = addr
		return admin.NewClient(o)
	}, 0)
}
